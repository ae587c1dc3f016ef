#include <cctype>
#include <charconv>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "tuner/base/strings.h"
#include "tuner/expr/expr_internal.h"

namespace ktune::expr_internal {

bool Lexer::Fail(int pos, int len, std::string_view what) {
  if (error_.ok()) error_ = absl::InvalidArgumentError(CaretMessage(what, text_, pos, len));
  return false;
}

bool Lexer::Advance() {
  while (cur_ < text_.size() && (text_[cur_] == ' ' || text_[cur_] == '\t' ||
                                 text_[cur_] == '\n' || text_[cur_] == '\r')) {
    ++cur_;
  }
  tok_ = Token{};
  tok_.pos = static_cast<int>(cur_);
  if (cur_ >= text_.size()) {
    tok_.kind = Tok::kEnd;
    return true;
  }
  const char c = text_[cur_];
  auto two = [&](char a, char b) {
    return c == a && cur_ + 1 < text_.size() && text_[cur_ + 1] == b;
  };
  auto emit = [&](Tok k, int n) {
    tok_.kind = k;
    tok_.len = n;
    tok_.text = text_.substr(cur_, static_cast<std::size_t>(n));
    cur_ += static_cast<std::size_t>(n);
    return true;
  };
  if (IsIdentStart(c)) {
    std::size_t end = cur_;
    while (end < text_.size() && IsIdentChar(text_[end])) ++end;
    const std::string_view word = text_.substr(cur_, end - cur_);
    Tok k = Tok::kIdent;
    if (word == "and")
      k = Tok::kAnd;
    else if (word == "or")
      k = Tok::kOr;
    else if (word == "not")
      k = Tok::kNot;
    else if (word == "if")
      k = Tok::kIf;
    else if (word == "else")
      k = Tok::kElse;
    else if (word == "true" || word == "True")
      k = Tok::kTrue;
    else if (word == "false" || word == "False")
      k = Tok::kFalse;
    return emit(k, static_cast<int>(end - cur_));
  }
  if ((c >= '0' && c <= '9') ||
      (c == '.' && cur_ + 1 < text_.size() && text_[cur_ + 1] >= '0' && text_[cur_ + 1] <= '9')) {
    return LexNumber();
  }
  if (c == '"' || c == '\'') return LexString(c);
  if (two('*', '*')) return emit(Tok::kStarStar, 2);
  if (two('/', '/')) return emit(Tok::kSlashSlash, 2);
  if (two('<', '<')) return emit(Tok::kShl, 2);
  if (two('>', '>')) return emit(Tok::kShr, 2);
  if (two('=', '=')) return emit(Tok::kEq, 2);
  if (two('!', '=')) return emit(Tok::kNe, 2);
  if (two('<', '=')) return emit(Tok::kLe, 2);
  if (two('>', '=')) return emit(Tok::kGe, 2);
  if (two('&', '&')) return emit(Tok::kAndAnd, 2);
  if (two('|', '|')) return emit(Tok::kOrOr, 2);
  switch (c) {
    case '(': return emit(Tok::kLParen, 1);
    case ')': return emit(Tok::kRParen, 1);
    case ',': return emit(Tok::kComma, 1);
    case '?': return emit(Tok::kQuestion, 1);
    case ':': return emit(Tok::kColon, 1);
    case '+': return emit(Tok::kPlus, 1);
    case '-': return emit(Tok::kMinus, 1);
    case '*': return emit(Tok::kStar, 1);
    case '/': return emit(Tok::kSlash, 1);
    case '%': return emit(Tok::kPercent, 1);
    case '&': return emit(Tok::kAmp, 1);
    case '|': return emit(Tok::kPipe, 1);
    case '^': return emit(Tok::kCaret, 1);
    case '~': return emit(Tok::kTilde, 1);
    case '<': return emit(Tok::kLt, 1);
    case '>': return emit(Tok::kGt, 1);
    case '!': return emit(Tok::kBang, 1);
    case '=':
      return Fail(static_cast<int>(cur_), 1, "'=' is not an operator; use '==' to compare");
    default: break;
  }
  return Fail(static_cast<int>(cur_), 1,
              StrCat("unexpected character '", std::string(1, c), "'"));
}

bool Lexer::LexNumber() {
  const std::size_t start = cur_;
  std::size_t end = cur_;
  bool is_float = false;
  if (text_[end] == '0' && end + 1 < text_.size() &&
      (text_[end + 1] == 'x' || text_[end + 1] == 'X')) {
    end += 2;
    const std::size_t digits = end;
    while (end < text_.size() && std::isxdigit(static_cast<unsigned char>(text_[end]))) ++end;
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(text_.data() + digits, text_.data() + end, v, 16);
    if (digits == end || ec != std::errc() ||
        v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return Fail(static_cast<int>(start), static_cast<int>(end - start),
                  "bad hexadecimal number");
    }
    tok_.kind = Tok::kInt;
    tok_.i = static_cast<std::int64_t>(v);
  } else {
    while (end < text_.size() && text_[end] >= '0' && text_[end] <= '9') ++end;
    if (end < text_.size() && text_[end] == '.') {
      is_float = true;
      ++end;
      while (end < text_.size() && text_[end] >= '0' && text_[end] <= '9') ++end;
    }
    if (end < text_.size() && (text_[end] == 'e' || text_[end] == 'E')) {
      std::size_t e = end + 1;
      if (e < text_.size() && (text_[e] == '+' || text_[e] == '-')) ++e;
      if (e < text_.size() && text_[e] >= '0' && text_[e] <= '9') {
        is_float = true;
        end = e;
        while (end < text_.size() && text_[end] >= '0' && text_[end] <= '9') ++end;
      }
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + end;
    if (is_float) {
      auto [p, ec] = std::from_chars(first, last, tok_.f);
      if (ec != std::errc() || p != last) {
        return Fail(static_cast<int>(start), static_cast<int>(end - start), "bad number");
      }
      tok_.kind = Tok::kFloat;
    } else {
      auto [p, ec] = std::from_chars(first, last, tok_.i);
      if (ec != std::errc() || p != last) {
        return Fail(static_cast<int>(start), static_cast<int>(end - start),
                    "integer literal does not fit in 64 bits");
      }
      tok_.kind = Tok::kInt;
    }
  }
  if (end < text_.size() && IsIdentChar(text_[end])) {
    return Fail(static_cast<int>(end), 1, "unexpected character after a number");
  }
  tok_.len = static_cast<int>(end - start);
  tok_.text = text_.substr(start, end - start);
  cur_ = end;
  return true;
}

bool Lexer::LexString(char quote) {
  const std::size_t start = cur_;
  std::size_t i = cur_ + 1;
  std::string s;
  while (i < text_.size() && text_[i] != quote) {
    if (text_[i] == '\\' && i + 1 < text_.size()) {
      ++i;
      const char e = text_[i];
      s.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
    } else {
      s.push_back(text_[i]);
    }
    ++i;
  }
  if (i >= text_.size()) {
    return Fail(static_cast<int>(start), static_cast<int>(i - start), "unterminated string");
  }
  tok_.kind = Tok::kString;
  tok_.s = std::move(s);
  tok_.len = static_cast<int>(i + 1 - start);
  tok_.text = text_.substr(start, i + 1 - start);
  cur_ = i + 1;
  return true;
}

}  // namespace ktune::expr_internal
