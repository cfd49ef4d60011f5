// GPT-2 byte-level alphabet: every byte 0..255 is shown as one printable
// Unicode character, so a BPE vocabulary over those characters can spell any
// byte string (no unknown tokens). Bytes 33..126, 161..172 and 174..255 stand
// for themselves; the other 68 bytes map to U+0100.. in byte order (so a
// space is "Ġ" U+0120 and a newline "Ċ" U+010A).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mtrain::data {

// Code point standing for byte b.
uint32_t byte_to_codepoint(uint8_t b);
// The byte a code point stands for, or -1 if it is not in the alphabet.
int codepoint_to_byte(uint32_t cp);

// UTF-8 encoding of a code point, appended to out.
void append_utf8(uint32_t cp, std::string& out);
// Decodes the UTF-8 character starting at s[pos]; advances pos. Invalid
// sequences yield U+FFFD and advance one byte.
uint32_t next_codepoint(std::string_view s, size_t& pos);

// Raw bytes -> their byte-level symbols (one alphabet character per byte).
std::string bytes_to_symbols(std::string_view bytes);
// Byte-level symbols -> raw bytes. Characters outside the alphabet are copied
// through unchanged (as HF's ByteLevel decoder does).
std::string symbols_to_bytes(std::string_view symbols);

}  // namespace mtrain::data
