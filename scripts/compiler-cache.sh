# Sourced by scripts/setup, scripts/test and scripts/fuzz: compile through ccache (Debian's
# `ccache`, installed by scripts/setup) when it is there. The cache lives outside the checkout
# (CCACHE_DIR, default ~/.cache/ccache), so a fresh clone on a machine that built before — CI's
# case — reuses its objects; CCACHE_BASEDIR makes the clone's path not matter. A cold cache
# costs nothing but the lookups. LADLE_NO_CCACHE=1 turns it off.
# Sets LADLE_CMAKE_LAUNCHER: the cmake arguments to add (empty without ccache).
LADLE_CMAKE_LAUNCHER=()
if [ "${LADLE_NO_CCACHE:-0}" != 1 ] && command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
  export CCACHE_NOHASHDIR=true
  # Precompiled headers (apps/ladle) are cacheable only with these.
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  LADLE_CMAKE_LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
else
  LADLE_CMAKE_LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER= -DCMAKE_CXX_COMPILER_LAUNCHER=)
fi
