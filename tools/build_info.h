// tools/build_info.h — facts about this build of the `burst` CLI, for `burst --version` and
// `burst info`: the generated part (tools/build_info.cc, cmake/build_info.cmake) and the
// version string everything prints.
#pragma once

#include <string>

namespace burst::cli {

/// `git describe --always --dirty --tags` of the source tree at build time, or "unknown".
const char* build_git_describe() noexcept;
/// CMAKE_BUILD_TYPE of this build.
const char* build_type() noexcept;
/// "burst <version> (git <describe>)", the line `burst --version` prints.
std::string version_line();

}  // namespace burst::cli
