#include "burst/error.h"

namespace burst {

const char* to_string(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::InvalidArgument: return "InvalidArgument";
    case ErrorKind::Unsupported: return "Unsupported";
    case ErrorKind::Communication: return "Communication";
    case ErrorKind::Internal: return "Internal";
  }
  return "Unknown";
}

Error::Error(ErrorKind kind, const std::string& message)
    : std::runtime_error(std::string(to_string(kind)) + ": " + message), kind_(kind), message_(message) {}

}  // namespace burst
