// The tool-call syntaxes of each version, as states of StreamParser::Impl:
//
//   V3, R1   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   V3.1     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   V3.2     <｜DSML｜function_calls>\n<｜DSML｜invoke name="NAME">\n
//              <｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>\n...
//            </｜DSML｜invoke>\n...</｜DSML｜function_calls>          (V4: tool_calls)
//
// A call goes through three stages. Before its name is confirmed (by <｜tool▁sep｜>, the
// ```json fence or the closing quote) it is an attempt: its text is kept verbatim in `raw`,
// and if it breaks, that text (the section's opener included while no call has been made) is
// returned as content — the "degrade to content" rule. Once the name is confirmed it is
// committed: kToolCallStart goes out and nothing of it can be taken back, so a later break
// only closes it early and marks the stream malformed. A call is complete when its own closer
// arrives with well-formed arguments; only complete calls make finish_reason tool_calls.
//
// A bare call without the section wrapper is accepted (the markers are unambiguous), and stray
// closers between calls are dropped, as dynamo does; text after a section is dropped, as all
// three reference parsers do.
#include "ladle/json/json.h"
#include "output_parser_impl.h"

namespace ladle::frontend {

using parser::Delim;
using parser::Mode;
using parser::RawValue;
using parser::Symbol;

namespace {

constexpr size_t kMaxNameBytes = 256;
constexpr size_t kMaxTypeBytes = 32;
// A number or literal string="false" value is held until it is known to be valid JSON; past
// this length it is streamed raw whatever it is.
constexpr size_t kMaxHeldValue = 64;

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool HasNonWs(std::string_view s) {
  for (char c : s) {
    if (!IsWs(c)) return true;
  }
  return false;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsWs(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsWs(s.back())) s.remove_suffix(1);
  return s;
}

// Bytes that can never be part of a tool name; seeing one means the attempt is not a call.
bool BadNameByte(unsigned char c) {
  if (c >= 0x80) return false;  // UTF-8 (validated at commit)
  if (IsWs(static_cast<char>(c))) return false;  // only inner whitespace is rejected, at commit
  if (c < 0x20 || c == 0x7F) return true;
  switch (c) {
    case '"': case '<': case '>': case '\\': case '`': case '{': case '}': case '[': case ']':
      return true;
    default:
      return false;
  }
}

bool IsTypeByte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool IsSectionClose(Delim d) { return d == Delim::kCallsEnd || d == Delim::kSectionClose; }
bool IsCallOpen(Delim d) { return d == Delim::kCallBegin || d == Delim::kInvokeOpen; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Sections

void StreamParser::Impl::OpenSection(bool explicit_wrapper, std::string_view opener_text) {
  section_implicit = !explicit_wrapper;
  degraded = false;
  section_calls = 0;
  raw.assign(opener_text);
  SetMode(Mode::kSection);
}

void StreamParser::Impl::CloseSection() {
  // After a section that produced calls the model has handed over to the tools; after one
  // that produced none (it was returned as content) the answer simply continues.
  raw.clear();
  degraded = false;
  SetMode(section_calls > 0 ? Mode::kPost : Mode::kContent);
}

size_t StreamParser::Impl::SectionText(std::string_view text) {
  if (degraded) {
    Emit(Event::Kind::kContent, text);
    return text.size();
  }
  size_t j = 0;
  while (j < text.size() && IsWs(text[j])) ++j;
  if (j == text.size()) {
    raw.append(text);  // whitespace between calls: kept only in case the section breaks
    return text.size();
  }
  if (section_implicit && section_calls > 0) {
    // Prose after a bare call: the call was the section, this is the text after it.
    raw.clear();
    SetMode(Mode::kPost);
    return 0;
  }
  raw.append(text.substr(0, j));
  Degrade();
  Emit(Event::Kind::kContent, text.substr(j));
  return text.size();
}

void StreamParser::Impl::StartAttempt(std::span<const Symbol> opener) {
  if (degraded) raw.clear();  // what came before already went out as content
  raw += SymbolsText(opener);
  name.clear();
  header.clear();
  call_bad = false;
  SetMode(g->dsml ? Mode::kDsmlName : g->v3_fence ? Mode::kCallType : Mode::kCallName);
}

void StreamParser::Impl::Degrade() {
  Emit(Event::Kind::kContent, raw);
  raw.clear();
  name.clear();
  degraded = true;
  malformed = true;
  SetMode(Mode::kSection);
}

// ---------------------------------------------------------------------------------------------
// Attempts: the call's type and name

size_t StreamParser::Impl::NameText(std::string_view text) {
  const bool type = mode == Mode::kCallType;
  std::string& buf = type ? header : name;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool bad = type ? !IsTypeByte(c) : BadNameByte(c);
    if (bad || buf.size() >= (type ? kMaxTypeBytes : kMaxNameBytes)) {
      raw.append(text.substr(0, i));
      Degrade();
      return i;  // the rest is read again as (degraded) section text
    }
    buf.push_back(static_cast<char>(c));
  }
  raw.append(text);
  return text.size();
}

bool StreamParser::Impl::Commit() {
  const std::string_view n = Trim(name);
  if (n.empty() || n.size() > kMaxNameBytes || !tokenizer::IsValidUtf8(n)) return false;
  for (char c : n) {
    if (IsWs(c)) return false;
  }
  Event e;
  e.kind = Event::Kind::kToolCallStart;
  e.tool_index = next_index++;
  e.tool_id = id_prefix + std::to_string(e.tool_index);
  e.tool_name.assign(n);
  out->push_back(std::move(e));
  open_index = next_index - 1;
  raw.clear();
  name.clear();
  call_bad = false;
  if (g->dsml) {
    // The object opens now so the client sees arguments start; parameters follow as they come.
    EmitArgs("{");
    params = 0;
    SetMode(Mode::kDsmlBody);
  } else {
    json.Reset();
    SetMode(Mode::kArgs);
  }
  return true;
}

void StreamParser::Impl::AttemptDelim(Delim d, std::span<const Symbol> spelled) {
  const bool confirms = (mode == Mode::kCallType && d == Delim::kSep) ||
                        (mode == Mode::kCallName && (g->v3_fence ? d == Delim::kFenceOpen : d == Delim::kSep)) ||
                        (mode == Mode::kDsmlName && d == Delim::kTagEnd);
  if (confirms) {
    raw += SymbolsText(spelled);
    if (mode == Mode::kCallType) {
      SetMode(Mode::kCallName);
    } else if (!Commit()) {
      Degrade();
    }
    return;
  }
  if (IsCallOpen(d)) {
    Degrade();
    StartAttempt(spelled);
    return;
  }
  raw += SymbolsText(spelled);
  Degrade();
  if (IsSectionClose(d)) CloseSection();
}

// ---------------------------------------------------------------------------------------------
// Committed calls

void StreamParser::Impl::EndCall(bool clean) {
  Event e;
  e.kind = Event::Kind::kToolCallEnd;
  e.tool_index = open_index;
  out->push_back(std::move(e));
  if (clean && !call_bad) {
    ++completed_calls;
  } else {
    malformed = true;
  }
  ++section_calls;
  open_index = -1;
  raw.clear();
  SetMode(Mode::kSection);
}

size_t StreamParser::Impl::ArgsText(std::string_view text) {
  // V3/V3.1 and raw DSML values: the model's JSON passes through untouched while it lasts.
  const size_t total = text.size();
  if (json.state() == parser::JsonScanner::State::kIncomplete) {
    const size_t n = json.Feed(text);
    EmitArgs(text.substr(0, n));
    text.remove_prefix(n);
  }
  if (json.state() == parser::JsonScanner::State::kError) {
    // Already invalid: keep passing it on (the client gets what the model wrote).
    call_bad = true;
    EmitArgs(text);
  } else if (HasNonWs(text)) {
    call_bad = true;  // junk after a complete value is dropped
  }
  return total;
}

size_t StreamParser::Impl::ValueText(std::string_view text) {
  if (mode == Mode::kDsmlSkip) return text.size();
  if (value_is_string || raw_value == RawValue::kAsString) {
    EmitArgsEscaped(text);
    return text.size();
  }
  if (raw_value == RawValue::kRaw) return ArgsText(text);
  // Undecided: decide from what is held so far.
  held.append(text);
  const size_t first = held.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return text.size();
  const char c = held[first];
  const bool structured = c == '{' || c == '[' || c == '"';
  const bool scalar = c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n';
  if (structured) {
    // Arrays and objects can be long: stream them from the start.
    raw_value = RawValue::kRaw;
    json.Reset();
    std::string h;
    h.swap(held);
    ArgsText(h);
    return text.size();
  }
  if (scalar) {
    json.Reset();
    const size_t n = json.Feed(held);
    const bool broken = json.state() == parser::JsonScanner::State::kError ||
                        (json.complete() && HasNonWs(std::string_view(held).substr(n)));
    if (!broken) {
      if (held.size() <= kMaxHeldValue) return text.size();  // keep holding
      raw_value = RawValue::kRaw;
      EmitArgs(std::string_view(held).substr(0, json.complete() ? n : held.size()));
      held.clear();
      return text.size();
    }
  }
  // Not JSON (e.g. a date or a word marked string="false"): pass it on as a string instead,
  // which is what the model evidently meant.
  raw_value = RawValue::kAsString;
  EmitArgs("\"");
  EmitArgsEscaped(held);
  held.clear();
  return text.size();
}

void StreamParser::Impl::DsmlFlushUndecided(bool at_close) {
  if (!at_close) {
    EmitArgs(held);  // truncated: what the model wrote, nothing invented
    held.clear();
    return;
  }
  json.Reset();
  const size_t n = json.Feed(held);
  json.End();
  if (json.complete() && !HasNonWs(std::string_view(held).substr(n))) {
    EmitArgs(std::string_view(held).substr(0, n));
  } else {
    EmitArgs("\"");
    EmitArgsEscaped(held);
    EmitArgs("\"");
  }
  held.clear();
}

void StreamParser::Impl::DsmlHeaderDone() {
  // `header` is `KEY" string="true` (the final quote belongs to the "> that ended it).
  const std::string_view h = header;
  const size_t q = h.find('"');
  const std::string_view key = Trim(h.substr(0, q));
  const std::string_view attrs = q == std::string_view::npos ? std::string_view() : Trim(h.substr(q + 1));
  bool is_string = true;
  constexpr std::string_view kAttr = "string=\"";
  if (attrs.substr(0, kAttr.size()) == kAttr && attrs.substr(kAttr.size()) == "false") {
    is_string = false;
  } else if (!attrs.empty() && !(attrs.substr(0, kAttr.size()) == kAttr && attrs.substr(kAttr.size()) == "true")) {
    call_bad = true;  // unknown attributes: the value is taken as a string
  }
  if (key.empty() || !tokenizer::IsValidUtf8(key)) {
    call_bad = true;
    SetMode(Mode::kDsmlSkip);
    return;
  }
  std::string piece = params > 0 ? ", " : "";
  json::AppendQuoted(key, &piece);
  piece += ": ";
  if (is_string) piece += '"';
  EmitArgs(piece);
  value_is_string = is_string;
  raw_value = RawValue::kUndecided;
  held.clear();
  json.Reset();
  SetMode(Mode::kDsmlValue);
}

void StreamParser::Impl::DsmlCloseValue() {
  if (mode == Mode::kDsmlSkip) return;
  ++params;
  if (value_is_string || raw_value == RawValue::kAsString) {
    EmitArgs("\"");
  } else if (raw_value == RawValue::kUndecided) {
    DsmlFlushUndecided(true);
  } else {
    json.End();
    if (!json.complete()) call_bad = true;
  }
}

void StreamParser::Impl::CallDelim(Delim d, std::span<const Symbol> spelled) {
  if (!g->dsml) {
    switch (d) {
      case Delim::kFenceClose: SetMode(Mode::kAfterArgs); return;
      case Delim::kCallEnd: EndCall(json.complete()); return;
      case Delim::kCallsEnd: EndCall(false); CloseSection(); return;
      case Delim::kCallBegin: EndCall(false); StartAttempt(spelled); return;
      default: call_bad = true; return;
    }
  }
  const bool in_value = mode == Mode::kDsmlValue || mode == Mode::kDsmlSkip;
  switch (d) {
    case Delim::kTagEnd:
      if (mode == Mode::kDsmlHeader) DsmlHeaderDone();
      return;
    case Delim::kParamOpen:
      if (mode != Mode::kDsmlBody) call_bad = true;
      if (in_value) DsmlCloseValue();
      header.clear();
      SetMode(Mode::kDsmlHeader);
      return;
    case Delim::kParamClose:
      if (in_value) {
        DsmlCloseValue();
      } else {
        call_bad = true;
      }
      SetMode(Mode::kDsmlBody);
      return;
    case Delim::kInvokeClose:
    case Delim::kSectionClose:
    case Delim::kInvokeOpen:
      if (in_value) DsmlCloseValue();
      if (mode != Mode::kDsmlBody) call_bad = true;
      EmitArgs("}");
      EndCall(d == Delim::kInvokeClose);
      if (d == Delim::kSectionClose) CloseSection();
      if (d == Delim::kInvokeOpen) StartAttempt(spelled);
      return;
    default:
      call_bad = true;
      return;
  }
}

// ---------------------------------------------------------------------------------------------
// Dispatch

void StreamParser::Impl::ToolDelim(Delim d, std::span<const Symbol> spelled) {
  switch (mode) {
    case Mode::kReasoning:
    case Mode::kContent:
    case Mode::kPost:
      if (d == Delim::kCallsBegin || d == Delim::kSectionOpen) {
        OpenSection(true, SymbolsText(spelled));
      } else if (IsCallOpen(d)) {
        OpenSection(false, "");
        StartAttempt(spelled);
      }
      // Anything else is a marker out of place: markup, never content.
      return;
    case Mode::kSection:
      if (IsCallOpen(d)) {
        StartAttempt(spelled);
      } else if (IsSectionClose(d)) {
        if (degraded) {
          Emit(Event::Kind::kContent, SymbolsText(spelled));
        } else if (section_calls == 0) {
          raw += SymbolsText(spelled);  // a section with no call at all: returned as it was
          Degrade();
        }
        CloseSection();
      } else if (degraded) {
        Emit(Event::Kind::kContent, SymbolsText(spelled));
      }
      // Stray markers between good calls (a repeated closer) are dropped.
      return;
    case Mode::kCallType:
    case Mode::kCallName:
    case Mode::kDsmlName: AttemptDelim(d, spelled); return;
    default: CallDelim(d, spelled); return;
  }
}

void StreamParser::Impl::FinishToolState() {
  switch (mode) {
    case Mode::kSection:
      // A section cut off before its first call is returned as content; after a good call a
      // missing closer is harmless.
      if (!degraded && section_calls == 0) Degrade();
      raw.clear();
      return;
    case Mode::kCallType:
    case Mode::kCallName:
    case Mode::kDsmlName: Degrade(); return;
    case Mode::kArgs:
    case Mode::kAfterArgs: EndCall(false); return;
    case Mode::kDsmlValue:
      if (!value_is_string && raw_value == RawValue::kUndecided) DsmlFlushUndecided(false);
      EndCall(false);
      return;
    case Mode::kDsmlBody:
    case Mode::kDsmlHeader:
    case Mode::kDsmlSkip: EndCall(false); return;
    default: return;
  }
}

}  // namespace ladle::frontend
