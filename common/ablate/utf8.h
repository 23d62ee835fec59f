// UTF-8 as protobuf accepts it in string fields: no overlong forms, surrogates or code points past
// U+10FFFF. Protobuf refuses to serialize anything else (a spec saved as Latin-1, a SQL value
// cast from bytes, a trainer's stderr cut mid-character), so text bound for a message is checked
// or cleaned with these first.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ablate {

// The offset of the first byte that does not start a valid UTF-8 sequence, or npos.
size_t InvalidUtf8At(std::string_view s);

// `s` with every byte that is not part of a valid UTF-8 sequence replaced by '?'.
std::string SanitizeUtf8(std::string_view s);

}  // namespace ablate
