// Image decoding and preprocessing (include/ladle/vision/image.h). Every test image is made
// here by encoding with the same libraries the decoder uses (libpng, libjpeg-turbo, libwebp,
// giflib), so there is no binary test data; lossless formats are checked pixel for pixel.
// Damaged input (every prefix of small files, random byte flips, headers declaring huge sizes)
// must give an error, never a crash or a large allocation.
//
// The fuzz corpus seeds (fuzz/corpus/image/) come from a disabled test, not part of any run:
//   LADLE_WRITE_IMAGE_SEEDS=fuzz/corpus/image build/tests/unit/vision/vision_test \
//     --gtest_also_run_disabled_tests --gtest_filter='ImageSeedsTest.*'
#include <gif_lib.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <png.h>
#include <webp/encode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "ladle/vision/image.h"

namespace ladle::vision {
namespace {

using Bytes = std::string;

// ---- Encoders. ----

struct PngSpec {
  int w = 0, h = 0;
  int color_type = PNG_COLOR_TYPE_RGB;
  int depth = 8;
  bool interlace = false;
  std::vector<png_color> palette;
  std::vector<uint8_t> trns;  // palette alpha
  std::vector<uint8_t> raw;   // packed rows as PNG stores them (16-bit big-endian)
};

void PngWriteCb(png_structp png, png_bytep p, size_t n) {
  static_cast<Bytes*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(p), n);
}
void PngFlushCb(png_structp) {}

// Errors here abort (libpng's default handler with no setjmp): the inputs are ours.
Bytes EncodePng(const PngSpec& s) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, PngWriteCb, PngFlushCb);
  png_set_IHDR(png, info, s.w, s.h, s.depth, s.color_type, s.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(png, info, s.palette.data(), static_cast<int>(s.palette.size()));
  if (!s.trns.empty()) png_set_tRNS(png, info, s.trns.data(), static_cast<int>(s.trns.size()), nullptr);
  png_write_info(png, info);
  const size_t stride = s.raw.size() / s.h;
  std::vector<png_bytep> rows(s.h);
  for (int y = 0; y < s.h; ++y) rows[y] = const_cast<uint8_t*>(s.raw.data()) + y * stride;
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

Bytes PngRgb(int w, int h, const std::vector<uint8_t>& rgb, bool interlace = false) {
  PngSpec s;
  s.w = w;
  s.h = h;
  s.interlace = interlace;
  s.raw = rgb;
  return EncodePng(s);
}

struct JpegSpec {
  int w = 0, h = 0;
  J_COLOR_SPACE space = JCS_RGB;
  int components = 3;
  int quality = 95;
  bool progressive = false;
  std::vector<uint8_t> pixels;
  int refinements = 0;  // > 0: a progressive script of one scan per AC coefficient, component and bit
};

Bytes EncodeJpeg(const JpegSpec& s) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = s.w;
  c.image_height = s.h;
  c.input_components = s.components;
  c.in_color_space = s.space;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, s.quality, TRUE);
  if (s.space == JCS_RGB) {  // no chroma subsampling: colours stay close
    for (int i = 0; i < c.num_components; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  }
  if (s.progressive) jpeg_simple_progression(&c);
  std::vector<jpeg_scan_info> script;
  if (s.refinements > 0) {
    script.push_back({c.num_components, {0, 1, 2, 3}, 0, 0, 0, 0});
    for (int comp = 0; comp < c.num_components; ++comp) {
      for (int k = 1; k < 64; ++k) {
        script.push_back({1, {comp}, k, k, 0, s.refinements});
        for (int al = s.refinements; al > 0; --al) script.push_back({1, {comp}, k, k, al, al - 1});
      }
    }
    c.scan_info = script.data();
    c.num_scans = static_cast<int>(script.size());
  }
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(s.pixels.data()) + size_t(c.next_scanline) * s.w * s.components;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Bytes out(reinterpret_cast<char*>(buf), size);
  std::free(buf);
  return out;
}

Bytes WebpOut(uint8_t* p, size_t n) {
  EXPECT_GT(n, 0u);
  Bytes out(reinterpret_cast<char*>(p), n);
  WebPFree(p);
  return out;
}
Bytes WebpLossless(int w, int h, const std::vector<uint8_t>& rgb) {
  uint8_t* p = nullptr;
  const size_t n = WebPEncodeLosslessRGB(rgb.data(), w, h, w * 3, &p);
  return WebpOut(p, n);
}
Bytes WebpLosslessRgba(int w, int h, const std::vector<uint8_t>& rgba) {
  uint8_t* p = nullptr;
  const size_t n = WebPEncodeLosslessRGBA(rgba.data(), w, h, w * 4, &p);
  return WebpOut(p, n);
}
Bytes WebpLossy(int w, int h, const std::vector<uint8_t>& rgb, float quality) {
  uint8_t* p = nullptr;
  const size_t n = WebPEncodeRGB(rgb.data(), w, h, w * 3, quality, &p);
  return WebpOut(p, n);
}

void Put24(Bytes* b, uint32_t v) {
  for (int k = 0; k < 3; ++k) b->push_back(static_cast<char>((v >> (8 * k)) & 0xFF));
}
void Put32(Bytes* b, uint32_t v) {
  for (int k = 0; k < 4; ++k) b->push_back(static_cast<char>((v >> (8 * k)) & 0xFF));
}
void Chunk(Bytes* b, std::string_view tag, const Bytes& payload) {
  b->append(tag);
  Put32(b, static_cast<uint32_t>(payload.size()));
  b->append(payload);
  if (payload.size() & 1) b->push_back('\0');
}

struct WebpFrame {
  int x = 0, y = 0, w = 0, h = 0;  // offsets even
  std::vector<uint8_t> rgba;
};

// An animated WebP container written by hand (libwebpmux is not linked): VP8X + ANIM + one ANMF
// per frame, each holding the VP8L chunk of a lossless still.
Bytes WebpAnimation(int canvas_w, int canvas_h, const std::vector<WebpFrame>& frames) {
  Bytes body = "WEBP";
  Bytes vp8x;
  vp8x.push_back(0x12);  // animation | alpha
  vp8x.append(3, '\0');
  Put24(&vp8x, canvas_w - 1);
  Put24(&vp8x, canvas_h - 1);
  Chunk(&body, "VP8X", vp8x);
  Bytes anim;
  Put32(&anim, 0xFF0000FF);  // background (ignored: the canvas starts transparent)
  anim.append(2, '\0');
  Chunk(&body, "ANIM", anim);
  for (const WebpFrame& f : frames) {
    const Bytes still = WebpLosslessRgba(f.w, f.h, f.rgba);
    Bytes anmf;
    Put24(&anmf, f.x / 2);
    Put24(&anmf, f.y / 2);
    Put24(&anmf, f.w - 1);
    Put24(&anmf, f.h - 1);
    Put24(&anmf, 100);
    anmf.push_back(0x02);  // no blending
    anmf.append(still.substr(12));  // the VP8L chunk
    Chunk(&body, "ANMF", anmf);
  }
  Bytes out = "RIFF";
  Put32(&out, static_cast<uint32_t>(body.size()));
  return out + body;
}

int GifWriteCb(GifFileType* gif, const GifByteType* p, int n) {
  static_cast<Bytes*>(gif->UserData)->append(reinterpret_cast<const char*>(p), n);
  return n;
}

struct GifFrame {
  int left = 0, top = 0, w = 0, h = 0;
  bool interlace = false;
  int transparent = -1;
  std::vector<GifColorType> local;  // empty: the global table
  std::vector<uint8_t> idx;         // row-major, top to bottom
};

Bytes EncodeGif(int sw, int sh, const std::vector<GifColorType>& global, const std::vector<GifFrame>& frames) {
  Bytes out;
  int err = 0;
  GifFileType* gif = EGifOpen(&out, GifWriteCb, &err);
  EGifSetGifVersion(gif, true);
  ColorMapObject* gmap = global.empty() ? nullptr : GifMakeMapObject(static_cast<int>(global.size()), global.data());
  EXPECT_EQ(EGifPutScreenDesc(gif, sw, sh, 8, 0, gmap), GIF_OK);
  for (const GifFrame& f : frames) {
    if (f.transparent >= 0) {
      GraphicsControlBlock gcb{};
      gcb.TransparentColor = f.transparent;
      gcb.DisposalMode = DISPOSAL_UNSPECIFIED;
      GifByteType ext[4];
      EGifGCBToExtension(&gcb, ext);
      EXPECT_EQ(EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, 4, ext), GIF_OK);
    }
    ColorMapObject* lmap = f.local.empty() ? nullptr : GifMakeMapObject(static_cast<int>(f.local.size()), f.local.data());
    EXPECT_EQ(EGifPutImageDesc(gif, f.left, f.top, f.w, f.h, f.interlace, lmap), GIF_OK);
    std::vector<int> order;
    if (f.interlace) {
      for (int y = 0; y < f.h; y += 8) order.push_back(y);
      for (int y = 4; y < f.h; y += 8) order.push_back(y);
      for (int y = 2; y < f.h; y += 4) order.push_back(y);
      for (int y = 1; y < f.h; y += 2) order.push_back(y);
    } else {
      for (int y = 0; y < f.h; ++y) order.push_back(y);
    }
    for (int y : order) {
      EXPECT_EQ(EGifPutLine(gif, const_cast<uint8_t*>(f.idx.data()) + y * f.w, f.w), GIF_OK);
    }
    if (lmap) GifFreeMapObject(lmap);
  }
  EXPECT_EQ(EGifCloseFile(gif, &err), GIF_OK);
  if (gmap) GifFreeMapObject(gmap);
  return out;
}

// ---- Test images. ----

// A pattern with every channel varying, so a swapped or shifted channel shows.
std::vector<uint8_t> Pattern(int w, int h, int seed = 0) {
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &rgb[(size_t(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(x * 37 + y * 11 + seed);
      p[1] = static_cast<uint8_t>(y * 53 + x * 3 + 7 * seed);
      p[2] = static_cast<uint8_t>((x ^ y) * 29 + 13);
    }
  }
  return rgb;
}

// A smooth image: lossy codecs keep it close.
std::vector<uint8_t> Gradient(int w, int h) {
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &rgb[(size_t(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / (w - 1));
      p[1] = static_cast<uint8_t>(y * 255 / (h - 1));
      p[2] = 128;
    }
  }
  return rgb;
}

uint8_t OnWhite(uint8_t c, uint8_t a) { return static_cast<uint8_t>((c * a + 255 * (255 - a) + 127) / 255); }

std::vector<GifColorType> Palette16() {
  std::vector<GifColorType> p(16);
  for (int i = 0; i < 16; ++i) {
    p[i] = {static_cast<GifByteType>(i * 16), static_cast<GifByteType>(255 - i * 16), static_cast<GifByteType>(i * 7)};
  }
  return p;
}

std::vector<uint8_t> Indices(int w, int h, int colours) {
  std::vector<uint8_t> idx(size_t(w) * h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) idx[size_t(y) * w + x] = static_cast<uint8_t>((x * 3 + y * 5) % colours);
  }
  return idx;
}

DecodedImage MustDecode(const Bytes& b, const ImageLimits& limits = {}) {
  auto r = DecodeImage(b, limits);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  EXPECT_EQ(r->rgb.size(), size_t(r->width) * r->height * 3);
  return std::move(r).value();
}

double MeanAbsDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += std::abs(int{a[i]} - int{b[i]});
  return a.empty() ? 0 : s / a.size();
}

uint32_t Crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return c ^ 0xFFFFFFFFu;
}

void SetBe32(Bytes* b, size_t at, uint32_t v) {
  for (int k = 0; k < 4; ++k) (*b)[at + k] = static_cast<char>(v >> (24 - 8 * k));
}

// ---- Formats and probing. ----

TEST(ImageFormatTest, NamesAndMediaTypes) {
  EXPECT_EQ(FormatName(ImageFormat::kPng), "png");
  EXPECT_EQ(FormatName(ImageFormat::kJpeg), "jpeg");
  EXPECT_EQ(FormatName(ImageFormat::kWebp), "webp");
  EXPECT_EQ(FormatName(ImageFormat::kGif), "gif");
  EXPECT_EQ(FormatMediaType(ImageFormat::kPng), "image/png");
  EXPECT_EQ(FormatMediaType(ImageFormat::kJpeg), "image/jpeg");
  EXPECT_EQ(FormatMediaType(ImageFormat::kWebp), "image/webp");
  EXPECT_EQ(FormatMediaType(ImageFormat::kGif), "image/gif");
}

TEST(ImageProbeTest, ReadsEveryFormatsHeader) {
  const auto rgb = Pattern(13, 7);
  struct Case {
    Bytes bytes;
    ImageFormat format;
  } cases[] = {
      {PngRgb(13, 7, rgb), ImageFormat::kPng},
      {EncodeJpeg({13, 7, JCS_RGB, 3, 90, false, rgb}), ImageFormat::kJpeg},
      {WebpLossless(13, 7, rgb), ImageFormat::kWebp},
      {EncodeGif(13, 7, Palette16(), {{0, 0, 13, 7, false, -1, {}, Indices(13, 7, 16)}}), ImageFormat::kGif},
  };
  for (const Case& c : cases) {
    auto info = ProbeImage(c.bytes);
    ASSERT_TRUE(info.ok()) << FormatName(c.format) << ": " << info.status().ToString();
    EXPECT_EQ(info->format, c.format);
    EXPECT_EQ(info->width, 13);
    EXPECT_EQ(info->height, 7);
  }
}

TEST(ImageProbeTest, UnknownAndEmpty) {
  for (Bytes b : {Bytes("hello world, not an image"), Bytes("BM\x36\x00\x00\x00", 6), Bytes(64, '\0')}) {
    auto r = ProbeImage(b);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), "not a PNG, JPEG, WebP or GIF image");
  }
  auto empty = DecodeImage("", {});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  auto magic_only = ProbeImage(Bytes("\x89PNG", 4));
  ASSERT_FALSE(magic_only.ok());
  EXPECT_EQ(magic_only.status().message(), "the PNG data is truncated");
}

// ---- PNG. ----

TEST(ImagePngTest, RgbExact) {
  const auto rgb = Pattern(17, 9);
  const DecodedImage d = MustDecode(PngRgb(17, 9, rgb));
  EXPECT_EQ(d.format, ImageFormat::kPng);
  EXPECT_EQ(d.width, 17);
  EXPECT_EQ(d.height, 9);
  EXPECT_EQ(d.rgb, rgb);
}

TEST(ImagePngTest, InterlacedExact) {
  const auto rgb = Pattern(23, 19, 5);
  const Bytes png = PngRgb(23, 19, rgb, /*interlace=*/true);
  EXPECT_EQ(png[28], 1);  // IHDR's interlace byte: Adam7
  EXPECT_EQ(MustDecode(png).rgb, rgb);
}

TEST(ImagePngTest, AlphaOnWhite) {
  PngSpec s;
  s.w = 16;
  s.h = 4;
  s.color_type = PNG_COLOR_TYPE_RGB_ALPHA;
  std::vector<uint8_t> expect;
  for (int y = 0; y < s.h; ++y) {
    for (int x = 0; x < s.w; ++x) {
      const uint8_t r = static_cast<uint8_t>(x * 16), g = static_cast<uint8_t>(y * 60), b = 200;
      const uint8_t a = static_cast<uint8_t>(x * 17);  // 0 (transparent) to 255 (opaque)
      s.raw.insert(s.raw.end(), {r, g, b, a});
      expect.insert(expect.end(), {OnWhite(r, a), OnWhite(g, a), OnWhite(b, a)});
    }
  }
  const DecodedImage d = MustDecode(EncodePng(s));
  EXPECT_EQ(d.rgb, expect);
  EXPECT_EQ(d.rgb[0], 255);  // fully transparent: white
  EXPECT_EQ(d.rgb[2], 255);
}

TEST(ImagePngTest, GreyscaleEveryDepth) {
  for (int depth : {1, 2, 4, 8}) {
    PngSpec s;
    s.w = 11;
    s.h = 3;
    s.color_type = PNG_COLOR_TYPE_GRAY;
    s.depth = depth;
    const int max = (1 << depth) - 1;
    const int per_byte = 8 / depth;
    const size_t stride = (s.w + per_byte - 1) / per_byte;
    s.raw.assign(stride * s.h, 0);
    std::vector<uint8_t> expect;
    for (int y = 0; y < s.h; ++y) {
      for (int x = 0; x < s.w; ++x) {
        const int v = (x + y) % (max + 1);
        s.raw[y * stride + x / per_byte] |= static_cast<uint8_t>(v << (8 - depth * (x % per_byte + 1)));
        const uint8_t g = static_cast<uint8_t>(v * 255 / max);
        expect.insert(expect.end(), {g, g, g});
      }
    }
    EXPECT_EQ(MustDecode(EncodePng(s)).rgb, expect) << "depth " << depth;
  }
}

TEST(ImagePngTest, GreyAlpha) {
  PngSpec s;
  s.w = 5;
  s.h = 2;
  s.color_type = PNG_COLOR_TYPE_GRAY_ALPHA;
  std::vector<uint8_t> expect;
  for (int i = 0; i < 10; ++i) {
    const uint8_t g = static_cast<uint8_t>(i * 25), a = static_cast<uint8_t>(255 - i * 28);
    s.raw.insert(s.raw.end(), {g, a});
    const uint8_t o = OnWhite(g, a);
    expect.insert(expect.end(), {o, o, o});
  }
  EXPECT_EQ(MustDecode(EncodePng(s)).rgb, expect);
}

TEST(ImagePngTest, PaletteWithTransparency) {
  PngSpec s;
  s.w = 9;
  s.h = 5;
  s.color_type = PNG_COLOR_TYPE_PALETTE;
  for (int i = 0; i < 6; ++i) {
    s.palette.push_back({static_cast<png_byte>(i * 40), static_cast<png_byte>(200 - i * 30), static_cast<png_byte>(i * 9)});
  }
  s.trns = {0, 128, 255};  // entry 0 transparent, 1 half, the rest opaque
  std::vector<uint8_t> expect;
  for (int y = 0; y < s.h; ++y) {
    for (int x = 0; x < s.w; ++x) {
      const uint8_t i = static_cast<uint8_t>((x + 2 * y) % 6);
      s.raw.push_back(i);
      const uint8_t a = i < 3 ? s.trns[i] : 255;
      const png_color c = s.palette[i];
      expect.insert(expect.end(), {OnWhite(c.red, a), OnWhite(c.green, a), OnWhite(c.blue, a)});
    }
  }
  EXPECT_EQ(MustDecode(EncodePng(s)).rgb, expect);
}

TEST(ImagePngTest, SixteenBit) {
  PngSpec s;
  s.w = 6;
  s.h = 3;
  s.depth = 16;
  const auto rgb8 = Pattern(6, 3, 9);
  for (uint8_t v : rgb8) {
    const uint16_t wide = static_cast<uint16_t>(v * 257);  // scales back to v exactly
    s.raw.push_back(static_cast<uint8_t>(wide >> 8));
    s.raw.push_back(static_cast<uint8_t>(wide & 0xFF));
  }
  EXPECT_EQ(MustDecode(EncodePng(s)).rgb, rgb8);
  // 16-bit RGBA too: alpha 65535 is opaque.
  PngSpec a = s;
  a.color_type = PNG_COLOR_TYPE_RGB_ALPHA;
  a.raw.clear();
  for (size_t i = 0; i < rgb8.size(); i += 3) {
    for (int k = 0; k < 3; ++k) a.raw.insert(a.raw.end(), {rgb8[i + k], rgb8[i + k]});
    a.raw.insert(a.raw.end(), {0xFF, 0xFF});
  }
  EXPECT_EQ(MustDecode(EncodePng(a)).rgb, rgb8);
}

// ---- JPEG. ----

TEST(ImageJpegTest, RgbClose) {
  const auto rgb = Gradient(40, 24);
  const DecodedImage d = MustDecode(EncodeJpeg({40, 24, JCS_RGB, 3, 95, false, rgb}));
  EXPECT_EQ(d.format, ImageFormat::kJpeg);
  EXPECT_EQ(d.width, 40);
  EXPECT_EQ(d.height, 24);
  EXPECT_LT(MeanAbsDiff(d.rgb, rgb), 2.0);
}

TEST(ImageJpegTest, ProgressiveClose) {
  const auto rgb = Gradient(33, 17);
  const Bytes jpg = EncodeJpeg({33, 17, JCS_RGB, 3, 95, true, rgb});
  ASSERT_NE(jpg.find("\xff\xc2", 0, 2), Bytes::npos);  // SOF2
  EXPECT_LT(MeanAbsDiff(MustDecode(jpg).rgb, rgb), 2.0);
}

TEST(ImageJpegTest, GreyscaleExpands) {
  std::vector<uint8_t> grey(20 * 10);
  for (size_t i = 0; i < grey.size(); ++i) grey[i] = static_cast<uint8_t>(i % 20 * 12);
  const DecodedImage d = MustDecode(EncodeJpeg({20, 10, JCS_GRAYSCALE, 1, 95, false, grey}));
  std::vector<uint8_t> expect;
  for (uint8_t g : grey) expect.insert(expect.end(), {g, g, g});
  EXPECT_LT(MeanAbsDiff(d.rgb, expect), 2.0);
  for (size_t i = 0; i < d.rgb.size(); i += 3) {
    EXPECT_EQ(d.rgb[i], d.rgb[i + 1]);
    EXPECT_EQ(d.rgb[i], d.rgb[i + 2]);
  }
}

TEST(ImageJpegTest, AdobeCmykConverts) {
  // Adobe CMYK is stored inverted: 255 = no ink. White, red (full magenta+yellow), black.
  const uint8_t colours[3][4] = {{255, 255, 255, 255}, {255, 0, 0, 255}, {255, 255, 255, 0}};
  const uint8_t expect[3][3] = {{255, 255, 255}, {255, 0, 0}, {0, 0, 0}};
  JpegSpec s{24, 8, JCS_CMYK, 4, 100, false, {}};
  for (int y = 0; y < s.h; ++y) {
    for (int x = 0; x < s.w; ++x) s.pixels.insert(s.pixels.end(), colours[x / 8], colours[x / 8] + 4);
  }
  const Bytes jpg = EncodeJpeg(s);
  ASSERT_NE(jpg.find("Adobe"), Bytes::npos);
  const DecodedImage d = MustDecode(jpg);
  for (int x = 0; x < s.w; ++x) {
    for (int ch = 0; ch < 3; ++ch) EXPECT_NEAR(d.rgb[(3 * s.w + x) * 3 + ch], expect[x / 8][ch], 6) << x;
  }
}

TEST(ImageJpegTest, TooManyScansRefused) {
  // A valid progressive file of 3 × 63 × 4 + 1 = 757 scans: each costs a pass over the image,
  // so past 500 (libjpeg-turbo's TurboJPEG limit) it is refused.
  JpegSpec s{16, 16, JCS_RGB, 3, 90, false, Gradient(16, 16)};
  s.refinements = 3;
  auto r = DecodeImage(EncodeJpeg(s), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "the JPEG data is corrupt: more than 500 progressive scans");
  s.refinements = 1;  // 379 scans: fine
  EXPECT_LT(MeanAbsDiff(MustDecode(EncodeJpeg(s)).rgb, s.pixels), 3.0);
}

// ---- WebP. ----

TEST(ImageWebpTest, LosslessExact) {
  const auto rgb = Pattern(21, 14, 3);
  const DecodedImage d = MustDecode(WebpLossless(21, 14, rgb));
  EXPECT_EQ(d.format, ImageFormat::kWebp);
  EXPECT_EQ(d.rgb, rgb);
}

TEST(ImageWebpTest, LosslessAlphaOnWhite) {
  std::vector<uint8_t> rgba, expect;
  for (int i = 0; i < 12 * 5; ++i) {
    const uint8_t r = static_cast<uint8_t>(i * 4), g = static_cast<uint8_t>(255 - i * 3), b = 77;
    const uint8_t a = static_cast<uint8_t>(i * 255 / 59);
    rgba.insert(rgba.end(), {r, g, b, a});
    expect.insert(expect.end(), {OnWhite(r, a), OnWhite(g, a), OnWhite(b, a)});
  }
  EXPECT_EQ(MustDecode(WebpLosslessRgba(12, 5, rgba)).rgb, expect);
}

TEST(ImageWebpTest, LossyClose) {
  const auto rgb = Gradient(48, 32);
  const DecodedImage d = MustDecode(WebpLossy(48, 32, rgb, 95));
  EXPECT_LT(MeanAbsDiff(d.rgb, rgb), 4.0);
}

TEST(ImageWebpTest, AnimationFirstFrame) {
  // Canvas 10x8; frame 1 is 4x4 at (2, 2), frame 2 (which must not show) covers everything.
  WebpFrame f1{2, 2, 4, 4, {}}, f2{0, 0, 10, 8, {}};
  for (int i = 0; i < 16; ++i) f1.rgba.insert(f1.rgba.end(), {static_cast<uint8_t>(i * 10), 20, 30, 255});
  f1.rgba[3] = 0;  // one transparent pixel
  for (int i = 0; i < 80; ++i) f2.rgba.insert(f2.rgba.end(), {1, 2, 3, 255});
  const Bytes anim = WebpAnimation(10, 8, {f1, f2});
  auto info = ProbeImage(anim);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->width, 10);
  EXPECT_EQ(info->height, 8);
  const DecodedImage d = MustDecode(anim);
  ASSERT_EQ(d.width, 10);
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 10; ++x) {
      const uint8_t* p = &d.rgb[(y * 10 + x) * 3];
      const bool inside = x >= 2 && x < 6 && y >= 2 && y < 6 && !(x == 2 && y == 2);
      if (inside) {
        const int i = (y - 2) * 4 + (x - 2);
        EXPECT_EQ(p[0], i * 10) << x << "," << y;
        EXPECT_EQ(p[1], 20);
        EXPECT_EQ(p[2], 30);
      } else {
        EXPECT_EQ(p[0], 255) << x << "," << y;
        EXPECT_EQ(p[1], 255);
        EXPECT_EQ(p[2], 255);
      }
    }
  }
}

// ---- GIF. ----

TEST(ImageGifTest, GlobalPaletteExact) {
  const auto pal = Palette16();
  const auto idx = Indices(15, 6, 16);
  const DecodedImage d = MustDecode(EncodeGif(15, 6, pal, {{0, 0, 15, 6, false, -1, {}, idx}}));
  EXPECT_EQ(d.format, ImageFormat::kGif);
  std::vector<uint8_t> expect;
  for (uint8_t i : idx) expect.insert(expect.end(), {pal[i].Red, pal[i].Green, pal[i].Blue});
  EXPECT_EQ(d.rgb, expect);
}

TEST(ImageGifTest, InterlacedLocalPaletteTransparency) {
  auto local = Palette16();
  for (auto& c : local) c.Blue = 250;
  const auto idx = Indices(9, 21, 16);  // 21 rows: every interlace pass has rows
  GifFrame f{0, 0, 9, 21, true, 4, local, idx};
  const DecodedImage d = MustDecode(EncodeGif(9, 21, Palette16(), {f}));
  std::vector<uint8_t> expect;
  for (uint8_t i : idx) {
    if (i == 4) {
      expect.insert(expect.end(), {255, 255, 255});
    } else {
      expect.insert(expect.end(), {local[i].Red, local[i].Green, local[i].Blue});
    }
  }
  EXPECT_EQ(d.rgb, expect);
}

TEST(ImageGifTest, FirstFrameOnScreenAndFrameBeyondScreen) {
  const auto pal = Palette16();
  // Screen 8x6, first frame 3x2 at (4, 3); the second frame must not show.
  GifFrame f1{4, 3, 3, 2, false, -1, {}, {1, 2, 3, 4, 5, 6}};
  GifFrame f2{0, 0, 8, 6, false, -1, {}, std::vector<uint8_t>(48, 9)};
  const DecodedImage d = MustDecode(EncodeGif(8, 6, pal, {f1, f2}));
  ASSERT_EQ(d.width, 8);
  ASSERT_EQ(d.height, 6);
  for (int y = 0; y < 6; ++y) {
    for (int x = 0; x < 8; ++x) {
      const uint8_t* p = &d.rgb[(y * 8 + x) * 3];
      if (x >= 4 && x < 7 && y >= 3 && y < 5) {
        const auto& c = pal[f1.idx[(y - 3) * 3 + (x - 4)]];
        EXPECT_EQ(p[0], c.Red);
        EXPECT_EQ(p[1], c.Green);
        EXPECT_EQ(p[2], c.Blue);
      } else {
        EXPECT_EQ(p[0] & p[1] & p[2], 255) << x << "," << y;
      }
    }
  }
  // A frame reaching past the logical screen grows the image to cover it.
  const Bytes grown = EncodeGif(4, 4, pal, {{2, 1, 5, 5, false, -1, {}, std::vector<uint8_t>(25, 3)}});
  auto info = ProbeImage(grown);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->width, 7);
  EXPECT_EQ(info->height, 6);
  const DecodedImage g = MustDecode(grown);
  EXPECT_EQ(g.width, 7);
  EXPECT_EQ(g.rgb[(5 * 7 + 6) * 3], pal[3].Red);
}

// ---- Damaged input. ----

std::vector<Bytes> SmallFiles() {
  const auto rgb = Pattern(8, 6, 1);
  std::vector<uint8_t> rgba;
  for (size_t i = 0; i < rgb.size(); i += 3) rgba.insert(rgba.end(), {rgb[i], rgb[i + 1], rgb[i + 2], uint8_t(i * 5)});
  return {
      PngRgb(8, 6, rgb),
      PngRgb(8, 6, rgb, true),
      EncodeJpeg({8, 6, JCS_RGB, 3, 90, false, rgb}),
      EncodeJpeg({16, 16, JCS_RGB, 3, 90, true, Pattern(16, 16)}),
      WebpLossless(8, 6, rgb),
      WebpLosslessRgba(8, 6, rgba),
      WebpLossy(8, 6, rgb, 80),
      WebpAnimation(8, 6, {{2, 0, 2, 2, {1, 2, 3, 255, 4, 5, 6, 0, 7, 8, 9, 128, 1, 1, 1, 1}}}),
      EncodeGif(8, 6, Palette16(), {{0, 0, 8, 6, true, 2, {}, Indices(8, 6, 16)}}),
  };
}

TEST(ImageDamageTest, EveryPrefixIsAnErrorOrTheImage) {
  for (const Bytes& full : SmallFiles()) {
    auto whole = DecodeImage(full, {});
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    const std::string name(FormatName(whole->format));
    size_t ok_prefixes = 0;
    for (size_t n = 0; n < full.size(); ++n) {
      auto r = DecodeImage(std::string_view(full).substr(0, n), {});
      if (r.ok()) {
        // Accepted only when every pixel was read and just the trailer is missing (PNG's IEND
        // chunk, GIF's trailer byte; a JPEG without EOI is refused, as libjpeg runs into the
        // end while reading ahead).
        ++ok_prefixes;
        EXPECT_EQ(r->rgb, whole->rgb) << name << " prefix " << n;
        EXPECT_GE(n, full.size() - 12) << name << " prefix " << n;
      } else {
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << name << " prefix " << n << ": " << r.status().ToString();
      }
      (void)ProbeImage(std::string_view(full).substr(0, n));
    }
    EXPECT_LE(ok_prefixes, 12u) << name;
  }
}

TEST(ImageDamageTest, TruncationIsReportedAsSuch) {
  const auto rgb = Pattern(32, 32, 2);
  struct Case {
    Bytes bytes;
    const char* message;
  } cases[] = {
      {PngRgb(32, 32, rgb), "the PNG data is truncated"},
      {EncodeJpeg({32, 32, JCS_RGB, 3, 90, false, rgb}), "the JPEG data is truncated"},
      {WebpLossless(32, 32, rgb), "the WebP data is truncated"},
      {EncodeGif(32, 32, Palette16(), {{0, 0, 32, 32, false, -1, {}, Indices(32, 32, 16)}}), "the GIF data is truncated"},
  };
  for (const Case& c : cases) {
    auto r = DecodeImage(std::string_view(c.bytes).substr(0, c.bytes.size() / 2), {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), c.message);
  }
}

TEST(ImageDamageTest, RandomByteFlipsNeverCrash) {
  std::mt19937 rng(1234);
  size_t decoded = 0, refused = 0;
  for (const Bytes& full : SmallFiles()) {
    for (int iter = 0; iter < 400; ++iter) {
      Bytes b = full;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) b[rng() % b.size()] ^= static_cast<char>(1 + rng() % 255);
      auto info = ProbeImage(b);
      auto r = DecodeImage(b, {});
      if (r.ok()) {
        ++decoded;
        ASSERT_TRUE(info.ok());
        EXPECT_EQ(r->width, info->width);
        EXPECT_EQ(r->height, info->height);
        EXPECT_EQ(r->rgb.size(), size_t(r->width) * r->height * 3);
      } else {
        ++refused;
        EXPECT_TRUE(r.status().code() == StatusCode::kInvalidArgument ||
                    r.status().code() == StatusCode::kResourceExhausted)
            << r.status().ToString();
      }
    }
  }
  EXPECT_GT(refused, 0u);
  EXPECT_GT(decoded, 0u);
}

// ---- Limits and decompression bombs. ----

void ExpectRefusedFast(const Bytes& b, const ImageLimits& limits, std::string_view needle) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = DecodeImage(b, limits);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  EXPECT_LT(ms, 200);
}

TEST(ImageLimitsTest, PngBomb) {
  Bytes png = PngRgb(4, 4, Pattern(4, 4));
  SetBe32(&png, 16, 100000);
  SetBe32(&png, 20, 100000);
  SetBe32(&png, 29, Crc32(reinterpret_cast<const uint8_t*>(png.data()) + 12, 17));  // a valid IHDR
  auto info = ProbeImage(png);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->width, 100000);
  ExpectRefusedFast(png, {}, "a side may be at most 16384");
  ImageLimits wide;
  wide.max_side = 1 << 20;
  ExpectRefusedFast(png, wide, "10000000000 pixels; at most 33554432");
}

TEST(ImageLimitsTest, JpegGifWebpBombs) {
  const auto rgb = Pattern(8, 8);
  Bytes jpg = EncodeJpeg({8, 8, JCS_RGB, 3, 90, false, rgb});
  const size_t sof = jpg.find("\xff\xc0", 0, 2);
  ASSERT_NE(sof, Bytes::npos);
  jpg[sof + 5] = jpg[sof + 6] = jpg[sof + 7] = jpg[sof + 8] = '\xff';  // 65535 x 65535
  ExpectRefusedFast(jpg, {}, "65535x65535");

  Bytes gif = EncodeGif(8, 8, Palette16(), {{0, 0, 8, 8, false, -1, {}, Indices(8, 8, 16)}});
  gif[6] = gif[7] = gif[8] = gif[9] = '\xff';
  ExpectRefusedFast(gif, {}, "65535x65535");
  // A small screen but a huge first frame.
  Bytes gif2 = EncodeGif(8, 8, Palette16(), {{0, 0, 8, 8, false, -1, {}, Indices(8, 8, 16)}});
  const size_t desc = gif2.find('\x2c', 13 + 48);
  ASSERT_NE(desc, Bytes::npos);
  gif2[desc + 5] = gif2[desc + 6] = gif2[desc + 7] = gif2[desc + 8] = '\xff';
  ExpectRefusedFast(gif2, {}, "65535x65535");

  Bytes webp = WebpLossless(8, 8, rgb);
  ASSERT_EQ(webp.substr(12, 4), "VP8L");
  // VP8L header after the 0x2f signature: 14 bits width-1, 14 bits height-1 (little-endian).
  uint32_t bits = uint32_t(uint8_t(webp[21])) | uint32_t(uint8_t(webp[22])) << 8 | uint32_t(uint8_t(webp[23])) << 16 |
                  uint32_t(uint8_t(webp[24])) << 24;
  bits = (bits & ~0x0FFFFFFFu) | 16383u | (16383u << 14);
  for (int k = 0; k < 4; ++k) webp[21 + k] = static_cast<char>(bits >> (8 * k));
  ExpectRefusedFast(webp, {}, "16384x16384");
}

TEST(ImageLimitsTest, ConfiguredLimits) {
  const Bytes png = PngRgb(40, 30, Pattern(40, 30));
  ImageLimits bytes;
  bytes.max_bytes = static_cast<int64_t>(png.size()) - 1;
  ExpectRefusedFast(png, bytes, fmt::format("at most {}", png.size() - 1));
  bytes.max_bytes = static_cast<int64_t>(png.size());
  EXPECT_TRUE(DecodeImage(png, bytes).ok());
  ImageLimits side;
  side.max_side = 39;
  ExpectRefusedFast(png, side, "40x30; a side may be at most 39");
  side.max_side = 40;
  EXPECT_TRUE(DecodeImage(png, side).ok());
  ImageLimits pixels;
  pixels.max_pixels = 1199;
  ExpectRefusedFast(png, pixels, "1200 pixels; at most 1199");
  pixels.max_pixels = 1200;
  EXPECT_TRUE(DecodeImage(png, pixels).ok());
}

// ---- Preprocess. ----

PreprocessConfig Config(int patch, int merge, int max_side) {
  PreprocessConfig c;
  c.patch = patch;
  c.merge = merge;
  c.max_side = max_side;
  return c;
}

DecodedImage Solid(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  DecodedImage d;
  d.width = w;
  d.height = h;
  for (int i = 0; i < w * h; ++i) d.rgb.insert(d.rgb.end(), {r, g, b});
  return d;
}

TEST(ImagePreprocessTest, GridSizes) {
  const PreprocessConfig c = Config(16, 2, 1024);  // unit 32
  struct Case {
    int w, h, grid_w, grid_h;
  } cases[] = {
      {1000, 1000, 62, 62},  // fits: 31.25 units → 31, not scaled up to 32
      {1024, 1024, 64, 64},
      {2048, 1024, 64, 32},  // halved
      {3000, 2000, 64, 42},  // 1024 x 682.7 → 21 units high
      {4000, 100, 64, 2},    // 25.6 px high → at least one unit
      {100, 4000, 2, 64},
      {10, 10, 2, 2},        // tiny: grown to one unit
      {48, 16, 4, 2},        // 1.5 units rounds up, 0.5 up to one unit
      {47, 80, 2, 6},        // 1.47 → 1, 2.5 → 3
      {1, 1, 2, 2},
  };
  for (const Case& k : cases) {
    int gh = -1, gw = -1;
    GridFor(k.w, k.h, c, &gh, &gw);
    EXPECT_EQ(gw, k.grid_w) << k.w << "x" << k.h;
    EXPECT_EQ(gh, k.grid_h) << k.w << "x" << k.h;
  }
  // max_side not a multiple of the unit: the longer side stays below it.
  int gh = 0, gw = 0;
  GridFor(5000, 2500, Config(14, 2, 1000), &gh, &gw);
  EXPECT_EQ(gw * 14, 980);
  EXPECT_EQ(gh * 14, 504);  // 490 is 17.5 units: halves round up
}

TEST(ImagePreprocessTest, GridForMatchesPreprocess) {
  const PreprocessConfig cfgs[] = {Config(4, 2, 64), Config(3, 3, 40), Config(2, 1, 10), Config(5, 2, 30)};
  for (const auto& c : cfgs) {
    for (int w : {1, 3, 9, 17, 40, 63, 64, 65, 130}) {
      for (int h : {1, 8, 31, 77}) {
        DecodedImage d = Solid(w, h, 10, 20, 30);
        auto t = Preprocess(d, c);
        ASSERT_TRUE(t.ok()) << t.status().ToString();
        int gh = 0, gw = 0;
        GridFor(w, h, c, &gh, &gw);
        EXPECT_EQ(t->grid_h, gh);
        EXPECT_EQ(t->grid_w, gw);
        EXPECT_EQ(gh % c.merge, 0);
        EXPECT_EQ(gw % c.merge, 0);
        EXPECT_LE(std::max(gh, gw) * c.patch, c.max_side);
        EXPECT_EQ(t->merge, c.merge);
        EXPECT_EQ(t->pixels.size(), size_t(3) * gh * c.patch * gw * c.patch);
        EXPECT_EQ(t->patches(), gh * gw);
        EXPECT_EQ(t->groups(), gh / c.merge * (gw / c.merge));
      }
    }
  }
}

TEST(ImagePreprocessTest, InvalidConfig) {
  const DecodedImage d = Solid(8, 8, 1, 2, 3);
  for (const auto& c : {Config(0, 2, 64), Config(4, 0, 64), Config(16, 2, 31), Config(-1, 2, 64)}) {
    auto t = Preprocess(d, c);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    int gh = 7, gw = 7;
    GridFor(8, 8, c, &gh, &gw);
    EXPECT_EQ(gh, 0);
    EXPECT_EQ(gw, 0);
  }
  PreprocessConfig zero_std = Config(4, 2, 64);
  zero_std.std[1] = 0;
  EXPECT_EQ(Preprocess(d, zero_std).status().code(), StatusCode::kInvalidArgument);
  DecodedImage bad = d;
  bad.rgb.pop_back();
  EXPECT_EQ(Preprocess(bad, Config(4, 2, 64)).status().code(), StatusCode::kInvalidArgument);
}

TEST(ImagePreprocessTest, NormalisesConstantImage) {
  PreprocessConfig c = Config(8, 2, 64);
  c.mean = {0.48145466f, 0.4578275f, 0.40821073f};
  c.std = {0.26862954f, 0.26130258f, 0.27577711f};
  const uint8_t colour[3] = {255, 0, 128};
  // 100x20 shrinks to 64x16 (area averaging), 100x5 grows vertically to 16 (bilinear), 16x16 stays.
  for (auto [w, h] : {std::pair{100, 20}, std::pair{100, 5}, std::pair{16, 16}}) {
    auto t = Preprocess(Solid(w, h, colour[0], colour[1], colour[2]), c);
    ASSERT_TRUE(t.ok());
    const size_t plane = t->pixels.size() / 3;
    for (int ch = 0; ch < 3; ++ch) {
      const float expect = (colour[ch] / 255.0f - c.mean[ch]) / c.std[ch];
      for (size_t i = 0; i < plane; ++i) ASSERT_NEAR(t->pixels[ch * plane + i], expect, 1e-5) << w << "x" << h;
    }
  }
}

TEST(ImagePreprocessTest, AreaAveragingByHand) {
  PreprocessConfig c = Config(4, 2, 8);  // 16x16 → 8x8: each output is a 2x2 mean
  c.mean = {0, 0, 0};
  c.std = {1, 1, 1};
  DecodedImage d;
  d.width = d.height = 16;
  d.rgb = Pattern(16, 16, 4);
  auto t = Preprocess(d, c);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->grid_w * 4, 8);
  for (int ch = 0; ch < 3; ++ch) {
    for (int y = 0; y < 8; ++y) {
      for (int x = 0; x < 8; ++x) {
        auto at = [&](int sx, int sy) { return float(d.rgb[(sy * 16 + sx) * 3 + ch]); };
        const float mean = (at(2 * x, 2 * y) + at(2 * x + 1, 2 * y) + at(2 * x, 2 * y + 1) + at(2 * x + 1, 2 * y + 1)) / 4;
        EXPECT_NEAR(t->pixels[ch * 64 + y * 8 + x], mean / 255, 1e-6);
      }
    }
  }
  // 3 → 2 (12x12 to 8x8): fractional coverage, output 0 = (2·p0 + p1) / 3, output 1 = (p1 + 2·p2) / 3.
  DecodedImage e;
  e.width = e.height = 12;
  e.rgb = Pattern(12, 12, 6);
  auto u = Preprocess(e, c);
  ASSERT_TRUE(u.ok());
  const float wts[2][3] = {{2 / 3.f, 1 / 3.f, 0}, {0, 1 / 3.f, 2 / 3.f}};
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 8; ++x) {
      float v = 0;
      for (int j = 0; j < 3; ++j) {
        for (int i = 0; i < 3; ++i) v += wts[y % 2][j] * wts[x % 2][i] * e.rgb[((y / 2 * 3 + j) * 12 + x / 2 * 3 + i) * 3];
      }
      EXPECT_NEAR(u->pixels[y * 8 + x], v / 255, 1e-5) << x << "," << y;
    }
  }
}

TEST(ImagePreprocessTest, BilinearGrowByHand) {
  PreprocessConfig c = Config(4, 2, 64);  // 4x8 → 8x8: width doubles, height stays
  c.mean = {0, 0, 0};
  c.std = {1, 1, 1};
  DecodedImage d;
  d.width = 4;
  d.height = 8;
  d.rgb = Pattern(4, 8, 1);
  auto t = Preprocess(d, c);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->grid_w * 4, 8);
  ASSERT_EQ(t->grid_h * 4, 8);
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 8; ++x) {
      const double sx = std::clamp((x + 0.5) / 2 - 0.5, 0.0, 3.0);
      const int x0 = static_cast<int>(sx), x1 = std::min(x0 + 1, 3);
      const double f = sx - x0;
      const double v = (1 - f) * d.rgb[(y * 4 + x0) * 3] + f * d.rgb[(y * 4 + x1) * 3];
      EXPECT_NEAR(t->pixels[y * 8 + x], v / 255, 1e-5) << x << "," << y;
    }
  }
}

TEST(ImagePreprocessTest, HashIsTheDecodedPicture) {
  const auto rgb = Pattern(19, 11, 8);
  const PreprocessConfig c = Config(4, 2, 32);
  auto from_png = Preprocess(MustDecode(PngRgb(19, 11, rgb)), c);
  auto from_webp = Preprocess(MustDecode(WebpLossless(19, 11, rgb)), c);
  ASSERT_TRUE(from_png.ok() && from_webp.ok());
  EXPECT_EQ(from_png->hash_hi, from_webp->hash_hi);
  EXPECT_EQ(from_png->hash_lo, from_webp->hash_lo);
  EXPECT_TRUE(from_png->hash_hi != 0 || from_png->hash_lo != 0);
  // The config does not enter the hash; the pixels and dimensions do.
  auto other_cfg = Preprocess(MustDecode(PngRgb(19, 11, rgb)), Config(2, 1, 8));
  ASSERT_TRUE(other_cfg.ok());
  EXPECT_EQ(other_cfg->hash_lo, from_png->hash_lo);
  auto changed = rgb;
  changed[3 * 50 + 1] ^= 1;
  auto one_pixel = Preprocess(MustDecode(PngRgb(19, 11, changed)), c);
  ASSERT_TRUE(one_pixel.ok());
  EXPECT_FALSE(one_pixel->hash_hi == from_png->hash_hi && one_pixel->hash_lo == from_png->hash_lo);
  DecodedImage a = Solid(2, 3, 5, 5, 5), b = Solid(3, 2, 5, 5, 5);
  auto ha = Preprocess(a, c), hb = Preprocess(b, c);
  ASSERT_TRUE(ha.ok() && hb.ok());
  EXPECT_NE(ha->hash_lo, hb->hash_lo);
}

// Writes fuzz/corpus/image/ seeds when LADLE_WRITE_IMAGE_SEEDS names a directory (a tool, so
// disabled: see the top of the file).
TEST(ImageSeedsTest, DISABLED_WriteFuzzSeeds) {
  const char* dir = std::getenv("LADLE_WRITE_IMAGE_SEEDS");
  if (!dir) GTEST_SKIP() << "LADLE_WRITE_IMAGE_SEEDS not set";
  const auto rgb = Pattern(8, 6, 1);
  std::vector<uint8_t> rgba;
  for (size_t i = 0; i < rgb.size(); i += 3) rgba.insert(rgba.end(), {rgb[i], rgb[i + 1], rgb[i + 2], uint8_t(i * 5)});
  PngSpec pal;
  pal.w = 8;
  pal.h = 6;
  pal.color_type = PNG_COLOR_TYPE_PALETTE;
  pal.palette = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {0, 0, 255}};
  pal.trns = {0, 128};
  pal.depth = 2;
  pal.raw.assign(2 * 6, 0x1B);
  const std::pair<const char*, Bytes> seeds[] = {
      {"rgb.png", PngRgb(8, 6, rgb)},
      {"interlaced.png", PngRgb(8, 6, rgb, true)},
      {"palette-trns.png", EncodePng(pal)},
      {"baseline.jpg", EncodeJpeg({8, 6, JCS_RGB, 3, 80, false, rgb})},
      {"progressive.jpg", EncodeJpeg({16, 8, JCS_RGB, 3, 70, true, Pattern(16, 8)})},
      {"grey.jpg", EncodeJpeg({8, 8, JCS_GRAYSCALE, 1, 80, false, std::vector<uint8_t>(64, 90)})},
      {"cmyk.jpg", EncodeJpeg({8, 8, JCS_CMYK, 4, 80, false, std::vector<uint8_t>(256, 200)})},
      {"lossless.webp", WebpLossless(8, 6, rgb)},
      {"alpha.webp", WebpLosslessRgba(8, 6, rgba)},
      {"lossy.webp", WebpLossy(8, 6, rgb, 60)},
      {"animated.webp", WebpAnimation(8, 6, {{2, 0, 2, 2, {1, 2, 3, 255, 4, 5, 6, 0, 7, 8, 9, 128, 1, 1, 1, 1}}})},
      {"interlaced.gif", EncodeGif(8, 6, Palette16(), {{0, 0, 8, 6, true, 2, {}, Indices(8, 6, 16)}})},
      {"two-frames.gif", EncodeGif(6, 4, Palette16(), {{1, 1, 3, 2, false, -1, {}, {1, 2, 3, 4, 5, 6}},
                                                        {0, 0, 6, 4, false, 0, {}, std::vector<uint8_t>(24, 7)}})},
  };
  for (const auto& [name, bytes] : seeds) {
    ASSERT_TRUE(DecodeImage(bytes, {}).ok()) << name;
    std::ofstream(std::string(dir) + "/" + name, std::ios::binary) << bytes;
  }
}

}  // namespace
}  // namespace ladle::vision
