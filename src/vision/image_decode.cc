// Image bytes → RGB8 with Debian's decoders (image.h). The header is probed first by hand (a
// few dozen bytes, nothing allocated) so the limits are checked before any decoder sees the data.
//
// libpng and libjpeg report errors by longjmp. A longjmp that crosses a frame with destructors is
// undefined behaviour, so every call into those libraries happens in a small function whose
// locals are plain C data and which itself calls setjmp (Png*/Jpeg* below); the C++ callers own
// the buffers and clean-up and only see a bool. libwebp and giflib return error codes.
#include <fmt/format.h>
#include <gif_lib.h>
#include <png.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>

// jpeglib.h needs FILE and size_t declared before it.
#include <jerror.h>
#include <jpeglib.h>

#include "ladle/vision/image.h"

namespace ladle::vision {

std::string_view FormatName(ImageFormat f) {
  switch (f) {
    case ImageFormat::kPng: return "png";
    case ImageFormat::kJpeg: return "jpeg";
    case ImageFormat::kWebp: return "webp";
    case ImageFormat::kGif: return "gif";
  }
  return "unknown";
}

std::string_view FormatMediaType(ImageFormat f) {
  switch (f) {
    case ImageFormat::kPng: return "image/png";
    case ImageFormat::kJpeg: return "image/jpeg";
    case ImageFormat::kWebp: return "image/webp";
    case ImageFormat::kGif: return "image/gif";
  }
  return "application/octet-stream";
}

namespace {

// The names in messages ("the PNG data is truncated").
std::string_view Upper(ImageFormat f) {
  switch (f) {
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kWebp: return "WebP";
    case ImageFormat::kGif: return "GIF";
  }
  return "image";
}

Status Truncated(ImageFormat f) { return InvalidArgument(fmt::format("the {} data is truncated", Upper(f))); }

Status Corrupt(ImageFormat f, std::string_view why) {
  return InvalidArgument(fmt::format("the {} data is corrupt: {}", Upper(f), why));
}

const uint8_t* Bytes(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

uint32_t Be16(const uint8_t* p) { return (uint32_t{p[0]} << 8) | p[1]; }
uint32_t Be32(const uint8_t* p) { return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]; }
uint32_t Le16(const uint8_t* p) { return uint32_t{p[0]} | (uint32_t{p[1]} << 8); }

constexpr std::string_view kPngMagic("\x89PNG\r\n\x1a\n", 8);
constexpr std::string_view kJpegMagic("\xff\xd8\xff", 3);

// The format from the magic bytes. Input that is a proper prefix of a magic is reported as
// truncated rather than unknown: it is the start of that format's file.
Result<ImageFormat> Sniff(std::string_view b) {
  if (b.empty()) return InvalidArgument("the image data is empty");
  if (b.starts_with(kPngMagic)) return ImageFormat::kPng;
  if (b.starts_with(kJpegMagic)) return ImageFormat::kJpeg;
  if (b.size() >= 12 && b.starts_with("RIFF") && b.substr(8, 4) == "WEBP") return ImageFormat::kWebp;
  if (b.starts_with("GIF87a") || b.starts_with("GIF89a")) return ImageFormat::kGif;
  if (kPngMagic.starts_with(b)) return Truncated(ImageFormat::kPng);
  if (kJpegMagic.starts_with(b)) return Truncated(ImageFormat::kJpeg);
  if (b.size() < 12 && std::string_view("RIFF").starts_with(b.substr(0, 4))) return Truncated(ImageFormat::kWebp);
  if (b.size() < 6 && (std::string_view("GIF87a").starts_with(b) || std::string_view("GIF89a").starts_with(b))) {
    return Truncated(ImageFormat::kGif);
  }
  return InvalidArgument("not a PNG, JPEG, WebP or GIF image");
}

// ---- Probing: the dimensions from the header bytes alone. ----

Result<ImageInfo> ProbePng(std::string_view b) {
  // Signature, then the IHDR chunk: length 13, "IHDR", width, height (big-endian).
  if (b.size() < 24) return Truncated(ImageFormat::kPng);
  const uint8_t* p = Bytes(b);
  if (Be32(p + 8) != 13 || std::memcmp(p + 12, "IHDR", 4) != 0) {
    return Corrupt(ImageFormat::kPng, "the first chunk is not IHDR");
  }
  const uint32_t w = Be32(p + 16), h = Be32(p + 20);
  // The PNG spec caps both at 2^31 - 1; zero is invalid.
  if (w == 0 || h == 0 || w > 0x7fffffffu || h > 0x7fffffffu) {
    return Corrupt(ImageFormat::kPng, fmt::format("IHDR declares a {}x{} image", w, h));
  }
  return ImageInfo{ImageFormat::kPng, static_cast<int>(w), static_cast<int>(h)};
}

// Walks the marker segments to the first SOFn, skipping stray bytes between segments the way
// libjpeg's next_marker does, so the probe accepts what the decoder accepts.
Result<ImageInfo> ProbeJpeg(std::string_view b) {
  const uint8_t* p = Bytes(b);
  const size_t n = b.size();
  size_t i = 2;  // past SOI
  for (;;) {
    // Find 0xFF, skip fill bytes; FF 00 is a stuffed byte, not a marker.
    while (i < n && p[i] != 0xFF) ++i;
    while (i < n && p[i] == 0xFF) ++i;
    if (i >= n) return Truncated(ImageFormat::kJpeg);
    const uint8_t m = p[i++];
    if (m == 0x00) continue;
    if ((m >= 0xD0 && m <= 0xD7) || m == 0x01) continue;  // RSTn, TEM: no length
    if (m == 0xD8) return Corrupt(ImageFormat::kJpeg, "a second start-of-image marker");
    if (m == 0xD9 || m == 0xDA) return Corrupt(ImageFormat::kJpeg, "no frame header (SOF) before the image data");
    if (i + 2 > n) return Truncated(ImageFormat::kJpeg);
    const uint32_t len = Be16(p + i);
    if (len < 2) return Corrupt(ImageFormat::kJpeg, fmt::format("a marker segment of length {}", len));
    const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (sof) {
      // length, precision, height, width, components
      if (i + 8 > n) return Truncated(ImageFormat::kJpeg);
      const uint32_t h = Be16(p + i + 3), w = Be16(p + i + 5);
      if (w == 0 || h == 0) {
        return Corrupt(ImageFormat::kJpeg, fmt::format("the frame header declares a {}x{} image", w, h));
      }
      return ImageInfo{ImageFormat::kJpeg, static_cast<int>(w), static_cast<int>(h)};
    }
    i += len;
  }
}

Result<ImageInfo> ProbeWebp(std::string_view b) {
  WebPBitstreamFeatures f;
  const VP8StatusCode st = WebPGetFeatures(Bytes(b), b.size(), &f);
  if (st == VP8_STATUS_NOT_ENOUGH_DATA) return Truncated(ImageFormat::kWebp);
  if (st != VP8_STATUS_OK) return Corrupt(ImageFormat::kWebp, fmt::format("bad header (libwebp status {})", static_cast<int>(st)));
  if (f.width <= 0 || f.height <= 0) {
    return Corrupt(ImageFormat::kWebp, fmt::format("the header declares a {}x{} image", f.width, f.height));
  }
  return ImageInfo{ImageFormat::kWebp, f.width, f.height};
}

// The decoded GIF is the logical screen, grown to cover the first frame when that frame lies
// partly outside it (as browsers do), so the probe reads up to the first image descriptor.
Result<ImageInfo> ProbeGif(std::string_view b) {
  const uint8_t* p = Bytes(b);
  const size_t n = b.size();
  if (n < 13) return Truncated(ImageFormat::kGif);
  const uint32_t sw = Le16(p + 6), sh = Le16(p + 8);
  size_t i = 13;
  if (p[10] & 0x80) i += 3u << ((p[10] & 7) + 1);  // global colour table
  for (;;) {
    if (i >= n) return Truncated(ImageFormat::kGif);
    const uint8_t kind = p[i++];
    if (kind == 0x21) {  // extension: label, then sub-blocks until a zero-length one
      if (i >= n) return Truncated(ImageFormat::kGif);
      ++i;
      for (;;) {
        if (i >= n) return Truncated(ImageFormat::kGif);
        const uint8_t len = p[i++];
        if (len == 0) break;
        i += len;
      }
    } else if (kind == 0x2C) {  // image descriptor: left, top, width, height
      if (i + 8 > n) return Truncated(ImageFormat::kGif);
      const uint32_t w = std::max(sw, Le16(p + i) + Le16(p + i + 4));
      const uint32_t h = std::max(sh, Le16(p + i + 2) + Le16(p + i + 6));
      if (w == 0 || h == 0) return Corrupt(ImageFormat::kGif, fmt::format("it declares a {}x{} image", w, h));
      return ImageInfo{ImageFormat::kGif, static_cast<int>(w), static_cast<int>(h)};
    } else if (kind == 0x3B) {
      return Corrupt(ImageFormat::kGif, "it has no image");
    } else {
      return Corrupt(ImageFormat::kGif, fmt::format("unknown block type 0x{:02x}", kind));
    }
  }
}

Status CheckLimits(const ImageInfo& info, const ImageLimits& limits) {
  if (info.width > limits.max_side || info.height > limits.max_side) {
    return ResourceExhausted(fmt::format(
        "the {} image is {}x{}; a side may be at most {} pixels (image max_side)", Upper(info.format),
        info.width, info.height, limits.max_side));
  }
  const int64_t pixels = int64_t{info.width} * info.height;
  if (pixels > limits.max_pixels) {
    return ResourceExhausted(fmt::format(
        "the {} image is {}x{} = {} pixels; at most {} are allowed (image max_pixels)", Upper(info.format),
        info.width, info.height, pixels, limits.max_pixels));
  }
  return Status::Ok();
}

// Sizes a pixel buffer, turning an allocation failure into a Status (nothing may throw).
Status Allocate(std::vector<uint8_t>* v, size_t n, const ImageInfo& info, uint8_t fill = 0) {
  try {
    v->assign(n, fill);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(fmt::format("out of memory for a {}x{} image", info.width, info.height));
  } catch (const std::length_error&) {
    return ResourceExhausted(fmt::format("out of memory for a {}x{} image", info.width, info.height));
  }
  return Status::Ok();
}

// Composites `count` RGBA pixels on white into RGB, in place (out may alias in: it writes
// behind where it reads).
void RgbaOnWhite(const uint8_t* in, uint8_t* out, size_t count) {
  for (size_t k = 0; k < count; ++k, in += 4, out += 3) {
    const uint32_t a = in[3], na = 255 - a;
    out[0] = static_cast<uint8_t>((in[0] * a + 255 * na + 127) / 255);
    out[1] = static_cast<uint8_t>((in[1] * a + 255 * na + 127) / 255);
    out[2] = static_cast<uint8_t>((in[2] * a + 255 * na + 127) / 255);
  }
}

// ---- PNG (libpng). ----

struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
  bool truncated = false;
  char message[200] = {};
  uint32_t width = 0, height = 0;
  size_t rowbytes = 0;
};

void PngError(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(st->message, sizeof st->message, "%s", msg ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}

void PngWarning(png_structp, png_const_charp) {}

void PngRead(png_structp png, png_bytep out, size_t n) {
  auto* st = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > st->size - st->pos) {
    st->truncated = true;
    png_error(png, "truncated");
  }
  std::memcpy(out, st->data + st->pos, n);
  st->pos += n;
}

// Reads the header and asks libpng for RGBA8 whatever the stored format. setjmp here; only POD
// locals (see the top of the file).
bool PngReadHeader(PngState* st) {
  if (setjmp(png_jmpbuf(st->png))) return false;
  png_set_read_fn(st->png, st, PngRead);
  // Our own limits (checked on the probed IHDR) govern, not libpng's default of 1,000,000.
  png_set_user_limits(st->png, 0x7fffffff, 0x7fffffff);
  // Skip every ancillary chunk (text, ICC profiles, ...): nothing here uses them, and some are
  // compressed. IHDR, PLTE, tRNS, IDAT and IEND are always processed.
  png_set_keep_unknown_chunks(st->png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  png_read_info(st->png, st->info);
  const int type = png_get_color_type(st->png, st->info);
  const int depth = png_get_bit_depth(st->png, st->info);
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(st->png);
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(st->png);
  if (png_get_valid(st->png, st->info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(st->png);
  if (depth == 16) png_set_scale_16(st->png);
  if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(st->png);
  if (!(type & PNG_COLOR_MASK_ALPHA) && !png_get_valid(st->png, st->info, PNG_INFO_tRNS)) {
    png_set_add_alpha(st->png, 0xFF, PNG_FILLER_AFTER);
  }
  png_set_interlace_handling(st->png);
  png_read_update_info(st->png, st->info);
  st->width = png_get_image_width(st->png, st->info);
  st->height = png_get_image_height(st->png, st->info);
  st->rowbytes = png_get_rowbytes(st->png, st->info);
  return true;
}

bool PngReadPixels(PngState* st, png_bytepp rows) {
  if (setjmp(png_jmpbuf(st->png))) return false;
  png_read_image(st->png, rows);
  return true;
}

Status PngFailure(const PngState& st) {
  if (st.truncated) return Truncated(ImageFormat::kPng);
  return Corrupt(ImageFormat::kPng, st.message);
}

Status DecodePng(std::string_view bytes, const ImageInfo& info, DecodedImage* out) {
  PngState st;
  st.data = Bytes(bytes);
  st.size = bytes.size();
  st.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, PngError, PngWarning);
  if (st.png) st.info = png_create_info_struct(st.png);
  struct Destroy {
    PngState* st;
    ~Destroy() { png_destroy_read_struct(&st->png, st->info ? &st->info : nullptr, nullptr); }
  } destroy{&st};
  if (!st.png || !st.info) return ResourceExhausted("out of memory starting the PNG decoder");
  if (!PngReadHeader(&st)) return PngFailure(st);
  // The probe read the same IHDR; anything else means the transforms did not give RGBA8.
  if (st.width != static_cast<uint32_t>(info.width) || st.height != static_cast<uint32_t>(info.height) ||
      st.rowbytes != size_t{st.width} * 4) {
    return Corrupt(ImageFormat::kPng, "unexpected pixel layout after conversion");
  }
  const size_t pixels = size_t{st.width} * st.height;
  // RGBA for the whole image (interlaced images need it all at once), composited down to RGB in
  // place afterwards.
  LADLE_RETURN_IF_ERROR(Allocate(&out->rgb, pixels * 4, info));
  std::vector<png_bytep> rows;
  try {
    rows.resize(st.height);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory for the PNG row table");
  }
  for (uint32_t y = 0; y < st.height; ++y) rows[y] = out->rgb.data() + size_t{y} * st.rowbytes;
  if (!PngReadPixels(&st, rows.data())) return PngFailure(st);
  RgbaOnWhite(out->rgb.data(), out->rgb.data(), pixels);
  out->rgb.resize(pixels * 3);
  return Status::Ok();
}

// ---- JPEG (libjpeg-turbo). ----

// A progressive JPEG can carry thousands of tiny scans that each cost a pass over the image;
// libjpeg-turbo's own TurboJPEG API stops at 500 (TJFLAG_LIMITSCANS), and so do we.
constexpr int kMaxJpegScans = 500;

struct JpegState {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  bool created;
  bool truncated;
  char message[JMSG_LENGTH_MAX];
};

JpegState* JpegOf(j_common_ptr c) { return static_cast<JpegState*>(c->client_data); }

void JpegErrorExit(j_common_ptr c) {
  JpegState* st = JpegOf(c);
  c->err->format_message(c, st->message);
  std::longjmp(st->jump, 1);
}

// libjpeg pads a truncated stream with a fake EOI and carries on with a warning; we stop there
// instead (a grey bottom half is not the client's picture). Other warnings (stray bytes) are
// common in real files and harmless.
void JpegEmitMessage(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
    JpegState* st = JpegOf(c);
    st->truncated = true;
    std::longjmp(st->jump, 1);
  }
}

void JpegOutputMessage(j_common_ptr) {}

void JpegProgress(j_common_ptr c) {
  if (c->is_decompressor && reinterpret_cast<j_decompress_ptr>(c)->input_scan_number > kMaxJpegScans) {
    JpegState* st = JpegOf(c);
    std::snprintf(st->message, sizeof st->message, "more than %d progressive scans", kMaxJpegScans);
    std::longjmp(st->jump, 1);
  }
}

// setjmp here; only POD locals (see the top of the file).
bool JpegReadHeader(JpegState* st, const uint8_t* data, size_t size, long max_memory) {
  if (setjmp(st->jump)) return false;
  jpeg_create_decompress(&st->cinfo);
  st->created = true;
  // Caps libjpeg's whole-image coefficient buffers (progressive files): past it libjpeg would
  // want a backing store, which this build does not have, so it fails cleanly.
  st->cinfo.mem->max_memory_to_use = max_memory;
  st->progress.progress_monitor = JpegProgress;
  st->cinfo.progress = &st->progress;
  jpeg_mem_src(&st->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&st->cinfo, TRUE);
  return true;
}

// Decodes into `rgb` (width × height × 3); CMYK/YCCK come out as CMYK rows in `cmyk_row`
// (width × 4) and are converted here. Adobe's files store CMYK inverted (255 = no ink), and
// those are nearly all CMYK JPEGs; without the Adobe marker the values are taken as plain ink.
bool JpegReadPixels(JpegState* st, uint8_t* rgb, uint8_t* cmyk_row, bool cmyk) {
  if (setjmp(st->jump)) return false;
  jpeg_decompress_struct* c = &st->cinfo;
  c->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(c);
  if (c->output_width != c->image_width || c->output_height != c->image_height ||
      c->output_components != (cmyk ? 4 : 3)) {
    std::snprintf(st->message, sizeof st->message, "unexpected output geometry");
    return false;
  }
  const size_t w = c->output_width;
  const bool inverted = c->saw_Adobe_marker;
  while (c->output_scanline < c->output_height) {
    uint8_t* dst = rgb + size_t{c->output_scanline} * w * 3;
    JSAMPROW row = cmyk ? cmyk_row : dst;
    if (jpeg_read_scanlines(c, &row, 1) != 1) {
      std::snprintf(st->message, sizeof st->message, "the decoder stopped early");
      return false;
    }
    if (cmyk) {
      for (size_t x = 0; x < w; ++x) {
        uint32_t k = cmyk_row[4 * x + 3];
        if (!inverted) k = 255 - k;
        for (int ch = 0; ch < 3; ++ch) {
          uint32_t v = cmyk_row[4 * x + ch];
          if (!inverted) v = 255 - v;
          dst[3 * x + ch] = static_cast<uint8_t>((v * k + 127) / 255);
        }
      }
    }
  }
  return true;
}

Status JpegFailure(const JpegState& st) {
  if (st.truncated) return Truncated(ImageFormat::kJpeg);
  return Corrupt(ImageFormat::kJpeg, st.message);
}

Status DecodeJpeg(std::string_view bytes, const ImageInfo& info, const ImageLimits& limits, DecodedImage* out) {
  auto st = std::make_unique<JpegState>();  // zero-initialised: a few KB, off the stack
  st->cinfo.err = jpeg_std_error(&st->err);
  st->err.error_exit = JpegErrorExit;
  st->err.emit_message = JpegEmitMessage;
  st->err.output_message = JpegOutputMessage;
  st->cinfo.client_data = st.get();
  struct Destroy {
    JpegState* st;
    ~Destroy() {
      if (st->created) jpeg_destroy_decompress(&st->cinfo);
    }
  } destroy{st.get()};
  const int64_t budget = std::min<int64_t>(std::max<int64_t>(limits.max_pixels, 0), int64_t{1} << 40) * 8 + (64 << 20);
  const long max_memory = static_cast<long>(std::min<int64_t>(budget, std::numeric_limits<long>::max()));
  if (!JpegReadHeader(st.get(), Bytes(bytes), bytes.size(), max_memory)) return JpegFailure(*st);
  // libjpeg's own buffers are sized from these; they must be what the probe checked.
  if (st->cinfo.image_width != static_cast<JDIMENSION>(info.width) ||
      st->cinfo.image_height != static_cast<JDIMENSION>(info.height)) {
    return Corrupt(ImageFormat::kJpeg, fmt::format("the decoder reads a {}x{} frame where the header says {}x{}",
                                                   st->cinfo.image_width, st->cinfo.image_height, info.width,
                                                   info.height));
  }
  const bool cmyk = st->cinfo.jpeg_color_space == JCS_CMYK || st->cinfo.jpeg_color_space == JCS_YCCK;
  LADLE_RETURN_IF_ERROR(Allocate(&out->rgb, size_t(info.width) * info.height * 3, info));
  std::vector<uint8_t> row;
  if (cmyk) LADLE_RETURN_IF_ERROR(Allocate(&row, size_t(info.width) * 4, info));
  if (!JpegReadPixels(st.get(), out->rgb.data(), row.data(), cmyk)) return JpegFailure(*st);
  return Status::Ok();
}

// ---- WebP (libwebp; animations through libwebpdemux). ----

Status WebpFailure(VP8StatusCode code, std::string_view what) {
  if (code == VP8_STATUS_NOT_ENOUGH_DATA) return Truncated(ImageFormat::kWebp);
  if (code == VP8_STATUS_OUT_OF_MEMORY) return ResourceExhausted("out of memory decoding the WebP image");
  return Corrupt(ImageFormat::kWebp, fmt::format("{} (libwebp status {})", what, static_cast<int>(code)));
}

// Decodes a still bitstream (a whole file, or one animation frame's chunks) into `buf`, which
// the caller sized for `w` × `h` × channels.
VP8StatusCode WebpDecodeInto(const uint8_t* data, size_t size, WEBP_CSP_MODE mode, int w, int h, uint8_t* buf,
                             size_t buf_size) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return VP8_STATUS_INVALID_PARAM;
  const VP8StatusCode st = WebPGetFeatures(data, size, &config.input);
  if (st != VP8_STATUS_OK) return st;
  if (config.input.width != w || config.input.height != h) return VP8_STATUS_BITSTREAM_ERROR;
  config.output.colorspace = mode;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = buf;
  config.output.u.RGBA.stride = w * (mode == MODE_RGB ? 3 : 4);
  config.output.u.RGBA.size = buf_size;
  config.options.use_threads = 0;
  const VP8StatusCode result = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);  // external memory: frees nothing of ours
  return result;
}

Status DecodeWebpAnimation(std::string_view bytes, const ImageInfo& info, DecodedImage* out) {
  WebPData wd{Bytes(bytes), bytes.size()};
  WebPDemuxState state = WEBP_DEMUX_PARSE_ERROR;
  std::unique_ptr<WebPDemuxer, void (*)(WebPDemuxer*)> demux(WebPDemuxPartial(&wd, &state), WebPDemuxDelete);
  if (!demux || state == WEBP_DEMUX_PARSE_ERROR) return Corrupt(ImageFormat::kWebp, "bad animation container");
  if (state != WEBP_DEMUX_DONE) return Truncated(ImageFormat::kWebp);
  if (static_cast<int>(WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_WIDTH)) != info.width ||
      static_cast<int>(WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_HEIGHT)) != info.height) {
    return Corrupt(ImageFormat::kWebp, "the canvas size disagrees with the header");
  }
  WebPIterator it;
  if (!WebPDemuxGetFrame(demux.get(), 1, &it)) return Corrupt(ImageFormat::kWebp, "the animation has no frame");
  struct Release {
    WebPIterator* it;
    ~Release() { WebPDemuxReleaseIterator(it); }
  } release{&it};
  // The demuxer keeps frames inside the canvas; clip anyway rather than trust it.
  if (it.width <= 0 || it.height <= 0 || it.x_offset < 0 || it.y_offset < 0 || it.x_offset >= info.width ||
      it.y_offset >= info.height || it.width > info.width || it.height > info.height) {
    return Corrupt(ImageFormat::kWebp, "the first frame lies outside the canvas");
  }
  // The first frame on a transparent canvas (libwebp's WebPAnimDecoder ignores the background
  // colour too), composited on white.
  LADLE_RETURN_IF_ERROR(Allocate(&out->rgb, size_t(info.width) * info.height * 3, info, 255));
  std::vector<uint8_t> frame;
  LADLE_RETURN_IF_ERROR(Allocate(&frame, size_t(it.width) * it.height * 4, info));
  const VP8StatusCode st =
      WebpDecodeInto(it.fragment.bytes, it.fragment.size, MODE_RGBA, it.width, it.height, frame.data(), frame.size());
  if (st != VP8_STATUS_OK) return WebpFailure(st, "the first animation frame does not decode");
  const int cols = std::min(it.width, info.width - it.x_offset);
  const int rows = std::min(it.height, info.height - it.y_offset);
  for (int y = 0; y < rows; ++y) {
    RgbaOnWhite(frame.data() + size_t(y) * it.width * 4,
                out->rgb.data() + (size_t(y + it.y_offset) * info.width + it.x_offset) * 3, cols);
  }
  return Status::Ok();
}

Status DecodeWebp(std::string_view bytes, const ImageInfo& info, DecodedImage* out) {
  WebPBitstreamFeatures f;
  VP8StatusCode st = WebPGetFeatures(Bytes(bytes), bytes.size(), &f);
  if (st != VP8_STATUS_OK) return WebpFailure(st, "bad header");
  if (f.has_animation) return DecodeWebpAnimation(bytes, info, out);
  const size_t pixels = size_t(info.width) * info.height;
  if (!f.has_alpha) {
    LADLE_RETURN_IF_ERROR(Allocate(&out->rgb, pixels * 3, info));
    st = WebpDecodeInto(Bytes(bytes), bytes.size(), MODE_RGB, info.width, info.height, out->rgb.data(),
                        out->rgb.size());
    if (st != VP8_STATUS_OK) return WebpFailure(st, "the image does not decode");
    return Status::Ok();
  }
  LADLE_RETURN_IF_ERROR(Allocate(&out->rgb, pixels * 4, info));
  st = WebpDecodeInto(Bytes(bytes), bytes.size(), MODE_RGBA, info.width, info.height, out->rgb.data(),
                      out->rgb.size());
  if (st != VP8_STATUS_OK) return WebpFailure(st, "the image does not decode");
  RgbaOnWhite(out->rgb.data(), out->rgb.data(), pixels);
  out->rgb.resize(pixels * 3);
  return Status::Ok();
}

// ---- GIF (giflib), first frame only. ----

struct GifSource {
  const uint8_t* data;
  size_t size, pos;
  bool truncated;
};

int GifRead(GifFileType* gif, GifByteType* out, int n) {
  auto* src = static_cast<GifSource*>(gif->UserData);
  if (n <= 0) return 0;
  const size_t want = static_cast<size_t>(n);
  const size_t k = std::min(want, src->size - src->pos);
  if (k < want) src->truncated = true;
  std::memcpy(out, src->data + src->pos, k);
  src->pos += k;
  return static_cast<int>(k);
}

Status GifFailure(const GifSource& src, int code) {
  if (src.truncated) return Truncated(ImageFormat::kGif);
  const char* s = GifErrorString(code);
  return Corrupt(ImageFormat::kGif, s ? std::string_view(s) : std::string_view("unknown giflib error"));
}

Status DecodeGif(std::string_view bytes, const ImageInfo& info, DecodedImage* out) {
  GifSource src{Bytes(bytes), bytes.size(), 0, false};
  int err = 0;
  GifFileType* raw = DGifOpen(&src, GifRead, &err);
  if (!raw) return GifFailure(src, err);
  struct Close {
    GifFileType* gif;
    ~Close() {
      int ignored = 0;
      DGifCloseFile(gif, &ignored);
    }
  } close{raw};
  GifFileType* gif = raw;
  int transparent = NO_TRANSPARENT_COLOR;
  // Extensions up to the first image: only a graphic control block matters (transparency).
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif, &type) == GIF_ERROR) return GifFailure(src, gif->Error);
    if (type == IMAGE_DESC_RECORD_TYPE) break;
    if (type == TERMINATE_RECORD_TYPE) return Corrupt(ImageFormat::kGif, "it has no image");
    if (type != EXTENSION_RECORD_TYPE) return Corrupt(ImageFormat::kGif, "unexpected record");
    int code = 0;
    GifByteType* ext = nullptr;
    if (DGifGetExtension(gif, &code, &ext) == GIF_ERROR) return GifFailure(src, gif->Error);
    if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] == 4) {
      GraphicsControlBlock gcb;
      if (DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_OK) transparent = gcb.TransparentColor;
    }
    while (ext) {
      if (DGifGetExtensionNext(gif, &ext) == GIF_ERROR) return GifFailure(src, gif->Error);
    }
  }
  if (DGifGetImageDesc(gif) == GIF_ERROR) return GifFailure(src, gif->Error);
  const GifImageDesc& d = gif->Image;
  const int w = std::max(gif->SWidth, d.Left + d.Width), h = std::max(gif->SHeight, d.Top + d.Height);
  if (w != info.width || h != info.height || d.Left < 0 || d.Top < 0 || d.Width < 0 || d.Height < 0) {
    return Corrupt(ImageFormat::kGif, "the image descriptor disagrees with the header");
  }
  const ColorMapObject* cmap = d.ColorMap ? d.ColorMap : gif->SColorMap;
  if (!cmap || !cmap->Colors) return Corrupt(ImageFormat::kGif, "it has no colour table");
  // Pixels the frame does not cover, and transparent ones, are white (transparent on white).
  LADLE_RETURN_IF_ERROR(Allocate(&out->rgb, size_t(w) * h * 3, info, 255));
  if (d.Width == 0 || d.Height == 0) return Status::Ok();
  std::vector<uint8_t> line;
  LADLE_RETURN_IF_ERROR(Allocate(&line, size_t(d.Width), info));
  // Interlaced rows arrive in four passes: every 8th from 0, every 8th from 4, every 4th from 2,
  // every 2nd from 1.
  static constexpr int kStart[4] = {0, 4, 2, 1}, kStep[4] = {8, 8, 4, 2};
  const int passes = d.Interlace ? 4 : 1;
  for (int pass = 0; pass < passes; ++pass) {
    const int y0 = d.Interlace ? kStart[pass] : 0, step = d.Interlace ? kStep[pass] : 1;
    for (int y = y0; y < d.Height; y += step) {
      if (DGifGetLine(gif, line.data(), d.Width) == GIF_ERROR) return GifFailure(src, gif->Error);
      uint8_t* dst = out->rgb.data() + (size_t(d.Top + y) * w + d.Left) * 3;
      for (int x = 0; x < d.Width; ++x, dst += 3) {
        const int idx = line[x];
        if (idx == transparent) continue;
        if (idx >= cmap->ColorCount) {  // outside the table: black, as browsers draw it
          dst[0] = dst[1] = dst[2] = 0;
          continue;
        }
        dst[0] = cmap->Colors[idx].Red;
        dst[1] = cmap->Colors[idx].Green;
        dst[2] = cmap->Colors[idx].Blue;
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ImageInfo> ProbeImage(std::string_view bytes) {
  LADLE_ASSIGN_OR_RETURN(ImageFormat format, Sniff(bytes));
  switch (format) {
    case ImageFormat::kPng: return ProbePng(bytes);
    case ImageFormat::kJpeg: return ProbeJpeg(bytes);
    case ImageFormat::kWebp: return ProbeWebp(bytes);
    case ImageFormat::kGif: return ProbeGif(bytes);
  }
  return InvalidArgument("not a PNG, JPEG, WebP or GIF image");
}

Result<DecodedImage> DecodeImage(std::string_view bytes, const ImageLimits& limits) {
  if (static_cast<int64_t>(bytes.size()) > limits.max_bytes) {
    return ResourceExhausted(
        fmt::format("the image is {} bytes; at most {} are allowed (image max_bytes)", bytes.size(), limits.max_bytes));
  }
  LADLE_ASSIGN_OR_RETURN(ImageInfo info, ProbeImage(bytes));
  LADLE_RETURN_IF_ERROR(CheckLimits(info, limits));
  DecodedImage out;
  out.format = info.format;
  out.width = info.width;
  out.height = info.height;
  Status st;
  switch (info.format) {
    case ImageFormat::kPng: st = DecodePng(bytes, info, &out); break;
    case ImageFormat::kJpeg: st = DecodeJpeg(bytes, info, limits, &out); break;
    case ImageFormat::kWebp: st = DecodeWebp(bytes, info, &out); break;
    case ImageFormat::kGif: st = DecodeGif(bytes, info, &out); break;
  }
  if (!st.ok()) return st;
  return out;
}

}  // namespace ladle::vision
