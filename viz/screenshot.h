// Headless frames: an offscreen framebuffer of any size (no window needs to be
// shown or to fit on a screen), read back into a PNG with stb_image_write.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::viz {

class Offscreen {
 public:
  Offscreen() = default;
  Offscreen(const Offscreen&) = delete;
  Offscreen& operator=(const Offscreen&) = delete;
  ~Offscreen();

  // Needs a current OpenGL context (GLFW). Returns "" or what went wrong.
  std::string create(int width, int height);
  void bind() const;    // draw into it
  void unbind() const;  // back to the window
  std::vector<uint8_t> read() const;  // RGBA, top row first

 private:
  int width_ = 0, height_ = 0;
  unsigned fbo_ = 0, colour_ = 0;
};

// PNG files: "" on success, else the problem.
std::string write_png(const std::string& path, const std::vector<uint8_t>& rgba, int width, int height);
std::vector<uint8_t> read_png(const std::string& path, int& width, int& height);  // empty on failure

}  // namespace kvscope::viz
