#include "screenshot.h"

#define GLFW_INCLUDE_GLEXT
#include <GLFW/glfw3.h>

#include <cstring>
#include <string>

#include "stb_image.h"
#include "stb_image_write.h"
#include "util/error.h"
#include "util/file.h"

namespace kvscope::viz {

namespace {

// The framebuffer-object calls are not in OpenGL 1.x, so they are looked up.
struct Fbo {
  PFNGLGENFRAMEBUFFERSPROC gen_framebuffers = nullptr;
  PFNGLBINDFRAMEBUFFERPROC bind_framebuffer = nullptr;
  PFNGLDELETEFRAMEBUFFERSPROC delete_framebuffers = nullptr;
  PFNGLGENRENDERBUFFERSPROC gen_renderbuffers = nullptr;
  PFNGLBINDRENDERBUFFERPROC bind_renderbuffer = nullptr;
  PFNGLDELETERENDERBUFFERSPROC delete_renderbuffers = nullptr;
  PFNGLRENDERBUFFERSTORAGEPROC renderbuffer_storage = nullptr;
  PFNGLFRAMEBUFFERRENDERBUFFERPROC framebuffer_renderbuffer = nullptr;
  PFNGLCHECKFRAMEBUFFERSTATUSPROC check_status = nullptr;

  bool load() {
    auto get = [](const char* name) { return glfwGetProcAddress(name); };
    gen_framebuffers = reinterpret_cast<PFNGLGENFRAMEBUFFERSPROC>(get("glGenFramebuffers"));
    bind_framebuffer = reinterpret_cast<PFNGLBINDFRAMEBUFFERPROC>(get("glBindFramebuffer"));
    delete_framebuffers = reinterpret_cast<PFNGLDELETEFRAMEBUFFERSPROC>(get("glDeleteFramebuffers"));
    gen_renderbuffers = reinterpret_cast<PFNGLGENRENDERBUFFERSPROC>(get("glGenRenderbuffers"));
    bind_renderbuffer = reinterpret_cast<PFNGLBINDRENDERBUFFERPROC>(get("glBindRenderbuffer"));
    delete_renderbuffers = reinterpret_cast<PFNGLDELETERENDERBUFFERSPROC>(get("glDeleteRenderbuffers"));
    renderbuffer_storage = reinterpret_cast<PFNGLRENDERBUFFERSTORAGEPROC>(get("glRenderbufferStorage"));
    framebuffer_renderbuffer = reinterpret_cast<PFNGLFRAMEBUFFERRENDERBUFFERPROC>(get("glFramebufferRenderbuffer"));
    check_status = reinterpret_cast<PFNGLCHECKFRAMEBUFFERSTATUSPROC>(get("glCheckFramebufferStatus"));
    return gen_framebuffers && bind_framebuffer && delete_framebuffers && gen_renderbuffers && bind_renderbuffer &&
           delete_renderbuffers && renderbuffer_storage && framebuffer_renderbuffer && check_status;
  }
};

Fbo& fbo() {
  static Fbo f;
  return f;
}

}  // namespace

std::string Offscreen::create(int width, int height) {
  if (!fbo().load()) return "this OpenGL has no framebuffer objects (OpenGL 3.0 or later is needed)";
  GLint max_size = 0;
  glGetIntegerv(GL_MAX_RENDERBUFFER_SIZE, &max_size);
  if (width > max_size || height > max_size)
    return "the size " + std::to_string(width) + "x" + std::to_string(height) + " exceeds this OpenGL's limit of " +
           std::to_string(max_size);
  width_ = width, height_ = height;
  fbo().gen_framebuffers(1, &fbo_);
  fbo().bind_framebuffer(GL_FRAMEBUFFER, fbo_);
  fbo().gen_renderbuffers(1, &colour_);
  fbo().bind_renderbuffer(GL_RENDERBUFFER, colour_);
  fbo().renderbuffer_storage(GL_RENDERBUFFER, GL_RGBA8, width, height);
  fbo().framebuffer_renderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, colour_);
  const GLenum status = fbo().check_status(GL_FRAMEBUFFER);
  fbo().bind_framebuffer(GL_FRAMEBUFFER, 0);
  if (status != GL_FRAMEBUFFER_COMPLETE) return "the offscreen framebuffer is incomplete (status " + std::to_string(status) + ")";
  return "";
}

Offscreen::~Offscreen() {
  if (fbo_) fbo().delete_framebuffers(1, &fbo_);
  if (colour_) fbo().delete_renderbuffers(1, &colour_);
}

void Offscreen::bind() const { fbo().bind_framebuffer(GL_FRAMEBUFFER, fbo_); }
void Offscreen::unbind() const { fbo().bind_framebuffer(GL_FRAMEBUFFER, 0); }

std::vector<uint8_t> Offscreen::read() const {
  std::vector<uint8_t> pixels(size_t(width_) * size_t(height_) * 4);
  bind();
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width_, height_, GL_RGBA, GL_UNSIGNED_BYTE, pixels.data());
  // OpenGL's rows start at the bottom; images start at the top.
  const size_t row = size_t(width_) * 4;
  std::vector<uint8_t> tmp(row);
  for (int y = 0; y < height_ / 2; ++y) {
    uint8_t* a = pixels.data() + size_t(y) * row;
    uint8_t* b = pixels.data() + size_t(height_ - 1 - y) * row;
    std::memcpy(tmp.data(), a, row);
    std::memcpy(a, b, row);
    std::memcpy(b, tmp.data(), row);
  }
  for (size_t i = 3; i < pixels.size(); i += 4) pixels[i] = 255;  // opaque
  return pixels;
}

std::string write_png(const std::string& path, const std::vector<uint8_t>& rgba, int width, int height) {
  // RGB: the frame is opaque, and a quarter smaller without alpha.
  std::vector<uint8_t> rgb(size_t(width) * size_t(height) * 3);
  for (size_t i = 0, j = 0; i < rgba.size(); i += 4, j += 3) std::memcpy(&rgb[j], &rgba[i], 3);
  stbi_write_png_compression_level = 9;
  // Encoded in memory, then written and checked here: stbi_write_png ignores its own
  // write errors, and wrote a PNG cut short to a full disk with success.
  std::string png;
  const auto append = [](void* to, void* bytes, int n) {
    static_cast<std::string*>(to)->append(static_cast<char*>(bytes), size_t(n));
  };
  if (!stbi_write_png_to_func(append, &png, width, height, 3, rgb.data(), width * 3))
    return path + ": cannot encode the PNG";
  try {
    write_file_atomically(path, [&](std::ostream& out) { out.write(png.data(), std::streamsize(png.size())); });
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<uint8_t> read_png(const std::string& path, int& width, int& height) {
  int channels = 0;
  unsigned char* data = stbi_load(path.c_str(), &width, &height, &channels, 4);
  if (!data) return {};
  std::vector<uint8_t> out(data, data + size_t(width) * size_t(height) * 4);
  stbi_image_free(data);
  return out;
}

}  // namespace kvscope::viz
