// Errors: typed exceptions for user-facing failures, and a check macro for
// external calls. User input is validated with MT_REQUIRE (never assert) so
// that the message names the value and the rule.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mt {

// Base of every error meshtrain throws on purpose. The CLI prints what() and
// exits non-zero.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ConfigError : public Error {  // a configuration value breaks a rule
 public:
  using Error::Error;
};

class DataError : public Error {  // a corpus or token file is unusable
 public:
  using Error::Error;
};

class IoError : public Error {  // a file could not be opened, read or written
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace mt

// MT_THROW(ConfigError, "n_heads (", n, ") must be divisible by ...")
#define MT_THROW(Type, ...) throw ::mt::Type(::mt::detail::concat(__VA_ARGS__))

// MT_REQUIRE(cond, Type, message parts...): throws Type(message) unless cond.
#define MT_REQUIRE(cond, Type, ...) \
  do {                              \
    if (!(cond)) {                  \
      MT_THROW(Type, __VA_ARGS__);  \
    }                               \
  } while (0)

// Internal invariant (a bug in meshtrain, not bad input): reports file:line.
#define MT_CHECK(cond, ...)                                                       \
  do {                                                                            \
    if (!(cond)) {                                                                \
      MT_THROW(Error, __FILE__, ":", __LINE__,                                    \
               ": internal check failed: " #cond " " __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                             \
  } while (0)
