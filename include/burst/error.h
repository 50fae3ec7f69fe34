// burst/error.h — the one exception type of the library.
//
// Owns: burst::Error (a std::runtime_error with a kind) and the BURST_CHECK macro used at API
// boundaries. Invariant: every public entry point validates its inputs once and throws
// burst::Error with a message that names the offending values; kernels behind the boundary
// trust validated parameters. The library never calls exit() or abort() on bad input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace burst {

/// What went wrong, coarse enough for bindings to map onto their own exception types
/// (Python: InvalidArgument → ValueError, Unsupported → NotImplementedError, others →
/// RuntimeError).
enum class ErrorKind { InvalidArgument, Unsupported, Communication, Internal };

/// Name of an ErrorKind ("InvalidArgument", ...). Never throws.
const char* to_string(ErrorKind kind) noexcept;

/// The exception thrown by every burst API on invalid input, unsupported combinations,
/// communication failure or internal inconsistency. what() is "<Kind>: <message>".
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message);
  ErrorKind kind() const noexcept { return kind_; }
  /// The message without the "<Kind>: " prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorKind kind_;
  std::string message_;
};

namespace detail {
template <typename... Args>
[[noreturn]] void throw_error(ErrorKind kind, const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  throw Error(kind, os.str());
}
}  // namespace detail

}  // namespace burst

/// Throws burst::Error(kind, <streamed args>) unless cond holds.
/// Example: BURST_CHECK(H % H_kv == 0, InvalidArgument, "H=", H, " not divisible by H_kv=", H_kv);
#define BURST_CHECK(cond, kind, ...)                                                  \
  do {                                                                                \
    if (!(cond)) ::burst::detail::throw_error(::burst::ErrorKind::kind, __VA_ARGS__); \
  } while (0)

/// Unconditional throw with the same message convention.
#define BURST_FAIL(kind, ...) ::burst::detail::throw_error(::burst::ErrorKind::kind, __VA_ARGS__)
