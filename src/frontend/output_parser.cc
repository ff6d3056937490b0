// StreamParser: the driver that turns ids into symbols and symbols into events, plus the
// reasoning/content phases and the finish. The tool-call syntaxes live in tool_call_formats.cc.
#include "ladle/frontend/output_parser.h"

#include <fmt/format.h>

#include <random>

#include "ladle/json/json.h"
#include "output_parser_impl.h"

namespace ladle::frontend {

using parser::Ctx;
using parser::Delim;
using parser::kSymOther;
using parser::Mode;
using parser::Symbol;

std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kToolCalls: return "tool_calls";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "stop";
}

Result<FinishReason> ParseFinishReason(std::string_view name) {
  if (name == "stop") return FinishReason::kStop;
  if (name == "length") return FinishReason::kLength;
  if (name == "tool_calls") return FinishReason::kToolCalls;
  if (name == "cancelled") return FinishReason::kCancelled;
  if (name == "error") return FinishReason::kError;
  return InvalidArgument(fmt::format("unknown finish reason '{}' (stop, length, tool_calls, cancelled, error)", name));
}

bool PromptOpensReasoning(ModelVersion version, const tokenizer::Tokenizer& tok,
                          std::span<const tokenizer::TokenId> prompt) {
  const SpecialTokens& st = SpecialTokensFor(version);
  // Only the last few tokens matter: the generation prompt is "<｜Assistant｜><think>" (R1:
  // "<think>\n"), possibly after tool results.
  std::string tail;
  for (size_t n = 0; n < prompt.size() && n < 8; ++n) {
    const tokenizer::TokenId id = prompt[prompt.size() - 1 - n];
    if (st.think && id == *st.think) return true;
    if (st.end_think && id == *st.end_think) return false;
    if (!tok.IsValidId(id) || tok.IsAddedToken(id)) break;
    auto piece = tok.Decode(std::span<const tokenizer::TokenId>(&id, 1));
    if (!piece.ok()) break;
    tail.insert(0, *piece);
    const size_t end = tail.find_last_not_of(" \t\r\n");
    if (end == std::string::npos) continue;  // whitespace so far: look further back
    if (st.think) return false;              // text before the marker: not opened by id
    const std::string_view t = std::string_view(tail).substr(0, end + 1);
    if (t.size() >= 7 && t.substr(t.size() - 7) == "<think>") return true;
    if (t.size() >= 8) return false;
  }
  return false;
}

namespace {

std::string RandomIdPrefix() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s = "call_";
  for (int i = 0; i < 24; ++i) s.push_back(kAlnum[rng() % (sizeof(kAlnum) - 1)]);
  return s + "_";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Construction

Result<StreamParser> StreamParser::Create(ModelVersion version, tokenizer::Tokenizer tok, bool start_in_reasoning,
                                          StreamParserOptions opts) {
  const SpecialTokens& st = opts.special_tokens ? *opts.special_tokens : SpecialTokensFor(version);
  LADLE_ASSIGN_OR_RETURN(auto grammar, parser::GetGrammar(version, st));
  // The text of each control symbol, for returning a broken tool-call section verbatim.
  std::array<std::string, parser::kNumSymbols - 256> texts;
  for (const auto& [id, sym] : grammar->controls) {
    if (!tok.IsValidId(id) || !tok.IsAddedToken(id)) {
      return InvalidArgument(fmt::format("control token {} of {} is not an added token of this tokenizer "
                                         "(use TokenizerForVersion)", id, ModelVersionName(version)));
    }
    LADLE_ASSIGN_OR_RETURN(texts[sym - 256], tok.Decode(std::span<const tokenizer::TokenId>(&id, 1)));
  }
  std::string prefix = opts.tool_id_prefix.empty() ? RandomIdPrefix() : opts.tool_id_prefix;
  return StreamParser(std::make_unique<Impl>(std::move(grammar), std::move(tok), start_in_reasoning,
                                             std::move(prefix), std::move(texts)));
}

StreamParser::StreamParser(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamParser::StreamParser(StreamParser&&) noexcept = default;
StreamParser& StreamParser::operator=(StreamParser&&) noexcept = default;
StreamParser::~StreamParser() = default;

StreamParser::Impl::Impl(std::shared_ptr<const parser::Grammar> grammar, tokenizer::Tokenizer t,
                         bool start_in_reasoning, std::string prefix,
                         std::array<std::string, parser::kNumSymbols - 256> texts)
    : g(std::move(grammar)),
      tok(t),
      decoder(std::move(t)),
      mode(start_in_reasoning ? Mode::kReasoning : Mode::kContent),
      id_prefix(std::move(prefix)),
      control_text(std::move(texts)) {
  cur_ctx = CtxFor(mode);
  matcher.Reset(&g->ctx[cur_ctx].set);
}

std::vector<Event> StreamParser::Push(std::span<const tokenizer::TokenId> ids) {
  std::vector<Event> events;
  if (impl_->finished) return events;
  impl_->out = &events;
  impl_->PushIds(ids);
  impl_->out = nullptr;
  return events;
}

std::vector<Event> StreamParser::Finish(FinishReason from_engine) {
  std::vector<Event> events;
  if (impl_->finished) return events;
  impl_->out = &events;
  impl_->FinishStream(from_engine);
  impl_->out = nullptr;
  return events;
}

bool StreamParser::finished() const { return impl_->finished; }
int64_t StreamParser::reasoning_tokens() const { return impl_->reasoning_tokens; }
int64_t StreamParser::invalid_ids() const { return impl_->invalid_ids; }

// ---------------------------------------------------------------------------------------------
// Driver

void StreamParser::Impl::PushIds(std::span<const tokenizer::TokenId> ids) {
  // Each token is matched as it comes, so the phase a token is counted in (reasoning_tokens)
  // never depends on how the ids were chunked.
  for (const tokenizer::TokenId id : ids) {
    if (!tok.IsValidId(id)) {
      ++invalid_ids;
      continue;
    }
    if (mode == Mode::kReasoning) ++reasoning_tokens;
    if (!tok.IsAddedToken(id)) {
      text_buf.clear();
      (void)decoder.Push(id, &text_buf);  // cannot fail: the id is valid
      if (!text_buf.empty()) FeedText(text_buf);
      continue;
    }
    // A control token. A partial UTF-8 sequence cannot continue across it, so its bytes are
    // passed on as they are (as Decode would).
    if (decoder.pending_bytes() > 0) FeedText(decoder.Flush());
    Symbol sym = kSymOther;
    for (const auto& [cid, csym] : g->controls) {
      if (cid == id) {
        sym = csym;
        break;
      }
    }
    FeedSymbol(sym);
  }
}

parser::Ctx StreamParser::Impl::CtxFor(Mode m) const {
  switch (m) {
    case Mode::kReasoning: return parser::kCtxReasoning;
    case Mode::kContent:
    case Mode::kPost: return parser::kCtxContent;
    case Mode::kSection: return parser::kCtxSection;
    case Mode::kCallType: return parser::kCtxCallHead;
    case Mode::kCallName: return g->v3_fence ? parser::kCtxV3Name : parser::kCtxCallHead;
    case Mode::kArgs: return g->v3_fence ? parser::kCtxV3Args : parser::kCtxArgs;
    case Mode::kAfterArgs: return parser::kCtxArgs;
    case Mode::kDsmlName:
    case Mode::kDsmlHeader: return parser::kCtxDsmlTag;
    case Mode::kDsmlBody: return parser::kCtxDsmlBody;
    case Mode::kDsmlValue:
    case Mode::kDsmlSkip: return parser::kCtxDsmlValue;
  }
  return parser::kCtxContent;
}

bool StreamParser::Impl::SetMode(Mode m) {
  mode = m;
  return CtxFor(m) != cur_ctx;
}

void StreamParser::Impl::SyncContext() {
  const Ctx c = CtxFor(mode);
  if (c == cur_ctx) return;
  cur_ctx = c;
  matcher.Reset(&g->ctx[c].set);
}

void StreamParser::Impl::FeedText(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    if (matcher.at_root()) {
      // Fast path: bytes that cannot start any delimiter of this state settle at once.
      const size_t n = matcher.PlainPrefix(text.substr(i));
      if (n > 0) {
        size_t used = 0;
        const Ctx before = cur_ctx;
        while (used < n && CtxFor(mode) == before) used += OnText(text.substr(i + used, n - used));
        i += used;
        SyncContext();
        continue;
      }
    }
    FeedSymbol(static_cast<uint8_t>(text[i++]));
  }
}

void StreamParser::Impl::FeedSymbol(Symbol first) {
  // Normally one symbol. When a handler switches the delimiter set while symbols it has not
  // seen are still in flight (the rest of a settled run and the held window — never more than
  // the longest delimiter), those few are read again under the new set.
  queue.clear();
  queue.push_back(first);
  for (size_t qi = 0; qi < queue.size(); ++qi) {
    const auto step = matcher.Feed(queue[qi]);
    const Ctx before = cur_ctx;
    size_t k = 0;
    while (k < step.settled && CtxFor(mode) == before) {
      const Symbol s = matcher.SettledSymbol(k);
      if (!parser::IsByte(s)) {
        OnStray(s);
        ++k;
        continue;
      }
      run_buf.clear();
      for (size_t j = k; j < step.settled; ++j) {
        const Symbol t = matcher.SettledSymbol(j);
        if (!parser::IsByte(t)) break;
        run_buf.push_back(static_cast<char>(t));
      }
      size_t used = 0;
      while (used < run_buf.size() && CtxFor(mode) == before) used += OnText(std::string_view(run_buf).substr(used));
      k += used;
    }
    if (CtxFor(mode) != before) {
      tail.clear();
      for (size_t j = k; j < step.settled; ++j) tail.push_back(matcher.SettledSymbol(j));
      const auto rest = step.match >= 0 ? matcher.set()->delimiter(step.match) : matcher.window();
      tail.insert(tail.end(), rest.begin(), rest.end());
      SyncContext();
      queue.insert(queue.begin() + static_cast<std::ptrdiff_t>(qi) + 1, tail.begin(), tail.end());
      continue;
    }
    if (step.match >= 0) {
      const auto& table = g->ctx[before];
      OnDelim(table.kinds[step.match], table.set.delimiter(step.match));
      SyncContext();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Handlers

size_t StreamParser::Impl::OnText(std::string_view text) {
  switch (mode) {
    case Mode::kReasoning:
      Emit(Event::Kind::kReasoning, text);
      span_bytes += text.size();
      return text.size();
    case Mode::kContent:
      Emit(Event::Kind::kContent, text);
      return text.size();
    case Mode::kPost:
      // After a tool-call section the model has handed over to the tools; the reference
      // parsers (vLLM, SGLang, dynamo) all drop what it writes there.
      return text.size();
    case Mode::kSection: return SectionText(text);
    case Mode::kCallType:
    case Mode::kCallName:
    case Mode::kDsmlName: return NameText(text);
    case Mode::kArgs:
    case Mode::kDsmlValue: return mode == Mode::kArgs ? ArgsText(text) : ValueText(text);
    case Mode::kAfterArgs:
    case Mode::kDsmlBody:
      // Between the pieces of a call only whitespace belongs; anything else is dropped and
      // the call no longer counts as clean.
      if (text.find_first_not_of(" \t\r\n") != std::string_view::npos) call_bad = true;
      return text.size();
    case Mode::kDsmlHeader:
      header.append(text);
      if (header.size() > 1024) {
        call_bad = true;
        SetMode(Mode::kDsmlSkip);  // a header this long is not one: drop the parameter
      }
      return text.size();
    case Mode::kDsmlSkip: return text.size();
  }
  return text.size();
}

void StreamParser::Impl::OnStray(Symbol s) {
  // kSymOther (BOS/EOS, placeholders, markers of another version) is never output. A lone
  // ｜DSML｜ token outside a tag is parser-owned too, except inside a section already being
  // returned verbatim, or while a call is still unconfirmed (then it breaks the call).
  if (s == kSymOther) return;
  switch (mode) {
    case Mode::kSection:
      if (!degraded && section_calls == 0) Degrade();
      if (degraded) Emit(Event::Kind::kContent, control_text[s - 256]);
      return;
    case Mode::kCallType:
    case Mode::kCallName:
    case Mode::kDsmlName:
      raw += control_text[s - 256];
      Degrade();
      return;
    case Mode::kReasoning:
    case Mode::kContent:
    case Mode::kPost: return;
    default:
      call_bad = true;
      return;
  }
}

void StreamParser::Impl::OnDelim(Delim d, std::span<const Symbol> spelled) {
  switch (mode) {
    case Mode::kReasoning:
      if (d == Delim::kEndThink) {
        SetMode(Mode::kContent);
      } else if (d == Delim::kThink) {
        // A <think> that opens the span repeats what the prompt already opened (R1 writes it
        // itself): drop it. Later, as a token it is still markup; as text it is reasoning.
        if (span_bytes > 0 && !g->think_is_token) Emit(Event::Kind::kReasoning, SymbolsText(spelled));
      } else if (d == Delim::kCallsBegin || d == Delim::kCallBegin || d == Delim::kSectionOpen ||
                 d == Delim::kInvokeOpen) {
        // A tool call opened by id while reasoning: the model skipped </think>.
        SetMode(Mode::kContent);
        ToolDelim(d, spelled);
      }
      // Any other marker here is out of place: markup, never reasoning text.
      return;
    case Mode::kContent:
    case Mode::kPost:
      if (d == Delim::kThink) {
        // Another reasoning span (dynamo's behaviour: every span is reasoning, none leaks).
        if (mode == Mode::kContent) {
          SetMode(Mode::kReasoning);
          span_bytes = 0;
        }
      } else if (d != Delim::kEndThink) {
        // A stray </think> is markup, never content.
        ToolDelim(d, spelled);
      }
      return;
    default:
      if (d == Delim::kThink || d == Delim::kEndThink) {
        // Reasoning markers inside a tool call are markup out of place.
        if (mode == Mode::kSection && degraded) Emit(Event::Kind::kContent, SymbolsText(spelled));
        return;
      }
      ToolDelim(d, spelled);
  }
}

// ---------------------------------------------------------------------------------------------
// Output

void StreamParser::Impl::Emit(Event::Kind kind, std::string_view text) {
  if (text.empty()) return;
  const int index = kind == Event::Kind::kToolCallArgs ? open_index : -1;
  if (!out->empty()) {
    Event& last = out->back();
    if (last.kind == kind && last.tool_index == index) {
      last.text.append(text);
      return;
    }
  }
  Event e;
  e.kind = kind;
  e.text.assign(text);
  e.tool_index = index;
  out->push_back(std::move(e));
}

void StreamParser::Impl::EmitArgsEscaped(std::string_view text) {
  // Argument strings must stay valid JSON: bytes that are not UTF-8 (the decoder passes
  // impossible sequences through) become U+FFFD.
  std::string piece;
  if (tokenizer::IsValidUtf8(text)) {
    json::AppendEscaped(text, &piece);
  } else {
    std::string clean;
    size_t i = 0;
    while (i < text.size()) {
      size_t n = 1;
      const auto c = static_cast<unsigned char>(text[i]);
      if (c >= 0xC0) n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      if (i + n <= text.size() && tokenizer::IsValidUtf8(text.substr(i, n))) {
        clean.append(text.substr(i, n));
        i += n;
      } else if (c < 0x80) {
        clean.push_back(static_cast<char>(c));
        ++i;
      } else {
        clean.append("\xEF\xBF\xBD");
        ++i;
      }
    }
    json::AppendEscaped(clean, &piece);
  }
  EmitArgs(piece);
}

std::string StreamParser::Impl::SymbolsText(std::span<const Symbol> syms) const {
  std::string s;
  for (Symbol x : syms) {
    if (parser::IsByte(x)) {
      s.push_back(static_cast<char>(x));
    } else if (x != kSymOther) {
      s += control_text[x - 256];
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Finish

void StreamParser::Impl::FinishStream(FinishReason from_engine) {
  // Bytes of an incomplete code point can no longer complete: pass them on as they are.
  const std::string rest = decoder.Flush();
  if (!rest.empty()) FeedText(rest);
  // kSymOther belongs to no delimiter, so feeding it settles the whole held window.
  FeedSymbol(kSymOther);
  FinishToolState();

  FinishReason reason = from_engine;
  if (from_engine == FinishReason::kStop || from_engine == FinishReason::kToolCalls) {
    reason = completed_calls > 0 ? FinishReason::kToolCalls : FinishReason::kStop;
  }
  Event e;
  e.kind = Event::Kind::kFinish;
  e.finish = reason;
  e.malformed = malformed;
  out->push_back(std::move(e));
  finished = true;
}

}  // namespace ladle::frontend
