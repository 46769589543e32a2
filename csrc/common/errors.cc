#include "common/errors.h"

namespace hvdlite::detail {

void checkFailed(const char* file, int line, const char* expr, const std::string& msg) {
  std::ostringstream out;
  out << "internal error in hvdlite (" << file << ":" << line << "): check '" << expr
      << "' failed";
  if (!msg.empty()) out << ": " << msg;
  out << ". This is a bug; please report it with this message.";
  throw Error(out.str());
}

}  // namespace hvdlite::detail
