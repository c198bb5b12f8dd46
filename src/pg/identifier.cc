#include "pg/identifier.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_string.h"

namespace outboxd::pg {
namespace {

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = json_internal::Utf8Length(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace

std::string PrintableName(std::string_view text) {
  constexpr size_t kShown = 80;
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < kShown;) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = c >= 0x80 ? json_internal::Utf8Length(text, i) : 1;
    if (c >= 0x20 && c != 0x7f && n > 0) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    ++i;
  }
  if (text.size() > kShown) out += "...";
  return out + "\"";
}

absl::Status CheckIdentifier(std::string_view name, std::string_view what) {
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " is empty; give it a name"));
  }
  if (name.find('\0') != std::string_view::npos || !IsValidUtf8(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " ", PrintableName(name),
                     " is not valid UTF-8 text; give a name in UTF-8 without control bytes"));
  }
  if (name.size() > kMaxIdentifierBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " ", PrintableName(name), " is ", name.size(),
                     " bytes long; PostgreSQL names are at most ", kMaxIdentifierBytes,
                     " bytes: choose a shorter one"));
  }
  return absl::OkStatus();
}

absl::Status CheckSlotName(std::string_view name, std::string_view what) {
  if (absl::Status status = CheckIdentifier(name, what); !status.ok()) return status;
  if (name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " ", PrintableName(name),
                     ": PostgreSQL allows only lower-case letters, digits and underscores in a "
                     "replication slot name; choose one like outboxd_app"));
  }
  return absl::OkStatus();
}

std::string QuoteCheckedIdentifier(std::string_view name) {
  std::string quoted = "\"";
  for (char c : name) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace outboxd::pg
