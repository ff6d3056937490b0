// RoutedEngine: the request flow (submit, stream, PD hand-off, re-route, cancel).
// Lock order: Routed::sink_mu, then RoutedEngineImpl::mu_. Sinks run with sink_mu held and
// mu_ released, so a request's outputs arrive in order and a sink may call back in.
#include <fmt/format.h>

#include <algorithm>

#include "ladle/core/logging.h"
#include "routed_engine_impl.h"
#include "sglang_scheduler.grpc.pb.h"

namespace ladle::cluster {

namespace sg = ::sglang::grpc::scheduler;

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t SteadyUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

RoutedEngineImpl::RoutedEngineImpl(RoutedEngineOptions o) : o_(std::move(o)) {}

RoutedEngineImpl::~RoutedEngineImpl() { Shutdown(); }

Result<std::unique_ptr<RoutedEngine>> RoutedEngine::Create(RoutedEngineOptions o, int64_t wait_ms) {
  PinGrpcCallbackQueue();
  auto e = std::make_unique<RoutedEngineImpl>(std::move(o));
  LADLE_RETURN_IF_ERROR(e->Init(wait_ms));
  return std::unique_ptr<RoutedEngine>(std::move(e));
}

Status RoutedEngineImpl::Init(int64_t wait_ms) {
  SwaDirectoryOptions d;
  d.lookup_timeout_ms = std::max<int64_t>(1, o_.directory_lookup_ms);
  d.dead_after_ms = std::max<int64_t>(1, o_.dead_after_ms);
  dir_ = std::make_unique<SwaDirectory>(d);
  if (!o_.directory_listen.empty()) LADLE_RETURN_IF_ERROR(dir_->Serve(o_.directory_listen, o_.directory_advertise));
  for (const std::string& m : o_.directory_peers) dir_->AddPeer(m);
  for (const std::string& a : o_.engines) AddEngine(a);
  poller_ = std::thread([this] { PollLoop(); });
  handoff_thread_ = std::thread([this] { HandoffLoop(); });
  if (wait_ms > 0) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] {
      for (const auto& e : eps_) {
        if (e->alive) return true;
      }
      return eps_.empty();
    });
  }
  return Status::Ok();
}

void RoutedEngineImpl::AddEngine(const std::string& address) {
  std::string a = address;
  if (a.rfind("grpc://", 0) == 0) a = a.substr(7);
  std::shared_ptr<grpc::Channel> probe;  // a new plain address: is it an SGLang worker?
  AddEndpoint(a, &probe);
  if (probe) ProbeSglang(a, std::move(probe));
}

// An address without a scheme may be an SGLang worker (only SMG's SglangScheduler): its
// VllmEngine answers UNIMPLEMENTED and its SglangScheduler answers. Then it rejoins as
// sglang://address (sglang_bridge.h) and the plain entry is retired. Asked until it answers
// (each try waits at most a second for the channel, so a worker that is not up yet is asked
// about once a second); Ladle and vLLM workers answer VllmEngine at the first try.
void RoutedEngineImpl::ProbeSglang(const std::string& a, std::shared_ptr<grpc::Channel> ch) {
  struct Probe {
    explicit Probe(RoutedEngineImpl* eng) : eng(eng) { eng->RpcBegin(); }
    ~Probe() { eng->RpcEnd(); }
    RoutedEngineImpl* eng;
    grpc::ClientContext ctx, ctx2;
    pb::GetModelInfoRequest vq;
    pb::GetModelInfoResponse vr;
    sg::GetModelInfoRequest sq;
    sg::GetModelInfoResponse sr;
    std::unique_ptr<pb::VllmEngine::Stub> v;
    std::unique_ptr<sg::SglangScheduler::Stub> s;
  };
  {
    std::lock_guard lock(mu_);
    if (shutdown_) return;
  }
  auto p = std::make_shared<Probe>(this);
  p->ctx.set_wait_for_ready(true);
  p->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  p->v = pb::VllmEngine::NewStub(ch);
  p->v->async()->GetModelInfo(&p->ctx, &p->vq, &p->vr, [this, p, a, ch](grpc::Status st) {
    const auto code = st.error_code();
    if (code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED) return ProbeSglang(a, ch);
    if (code != grpc::StatusCode::UNIMPLEMENTED) return;  // a VllmEngine worker (or a broken one)
    p->s = sg::SglangScheduler::NewStub(ch);
    p->ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o_.rpc_deadline_ms));
    p->s->async()->GetModelInfo(&p->ctx2, &p->sq, &p->sr, [this, p, a](grpc::Status st2) {
      if (!st2.ok()) return;
      {
        std::lock_guard lock(mu_);
        if (shutdown_) return;
      }
      LADLE_LOG_INFO("cluster.sglang_worker address={}", a);
      AddEngine("sglang://" + a);
      RemoveEngine(a);
    });
  });
}

void RoutedEngineImpl::AddEndpoint(const std::string& a, std::shared_ptr<grpc::Channel>* probe) {
  std::lock_guard lock(mu_);
  for (const auto& e : eps_) {
    if (e->address != a) continue;
    if (e->retired) {
      // Back in the fleet (maybe another process on the same address): learn it again.
      e->retired = false;
      e->known = false;
      e->ladle_engine = false;
      e->swa_cursor = 1;
      LADLE_LOG_INFO("cluster.engine_unretired address={}", a);
      cv_.notify_all();
    }
    return;
  }
  auto e = std::make_unique<Endpoint>();
  e->address = a;
  // Fail fast on a dead peer instead of waiting for a reconnect: the router re-routes.
  if (a.rfind("sglang://", 0) == 0 && (e->bridge = SglangBridge::Start(a.substr(9)))) {
    e->channel = e->bridge->channel();  // an SGLang worker, through VllmEngine (sglang_bridge.h)
  } else {
    e->channel = FailFastChannel(a);
    if (a.find("://") == std::string::npos) *probe = e->channel;
  }
  e->vllm = pb::VllmEngine::NewStub(e->channel);
  e->ladle = lrpc::LadleEngine::NewStub(e->channel);
  eps_.push_back(std::move(e));
}

void RoutedEngineImpl::RemoveEngine(const std::string& address) {
  std::string a = address;
  if (a.rfind("grpc://", 0) == 0) a = a.substr(7);
  int ep = -1;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < eps_.size(); ++i) {
      if (eps_[i]->address == a && !eps_[i]->retired) ep = static_cast<int>(i);
    }
    if (ep < 0) return;
    Endpoint& e = *eps_[static_cast<size_t>(ep)];
    e.retired = true;
    e.alive = false;  // chosen by no dispatch from here on
    LADLE_LOG_INFO("cluster.engine_retired address={}", a);
  }
  // Dead now, as an engine that stopped answering: its streams are cancelled and re-routed.
  MarkDead(ep, "left the fleet");
}

std::vector<kvcache::BlockKey> RoutedEngineImpl::KeysFor(const Endpoint& e, const std::vector<engine::TokenId>& tokens) const {
  return kvcache::ChainKeys(std::span<const uint32_t>(tokens.data(), tokens.size()), e.key_extras);
}

std::vector<SwaPeer> RoutedEngineImpl::LookupSwa(const Routed& r) {
  std::vector<SwaPeer> out;
  std::vector<kvcache::ExtraKey> extras;
  {
    std::lock_guard lock(mu_);
    for (const auto& e : eps_) {
      if (e->known && e->ladle_engine && e->alive && !e->key_extras.empty()) {
        extras = e->key_extras;  // one model: every Ladle engine keys blocks alike
        break;
      }
    }
  }
  if (extras.empty()) return out;
  // The tokens the stage will be sent (PrepareCall): the prompt plus what was generated. The
  // directory's keys carry no image hashes, so only blocks before the first image count.
  std::vector<engine::TokenId> tokens = r.prompt;
  if (r.sampling.n == 1) tokens.insert(tokens.end(), r.generated[0].begin(), r.generated[0].end());
  auto keys = kvcache::ChainKeys(std::span<const uint32_t>(tokens.data(), tokens.size()), extras);
  if (!r.images.empty()) keys.resize(std::min<size_t>(keys.size(), static_cast<size_t>(r.images[0].pos) / kvcache::kBlockTokens));
  if (keys.empty()) return out;
  const std::vector<std::string> holders = dir_->Lookup(keys);
  for (size_t i = keys.size(); i-- > 0;) {
    if (!holders[i].empty()) out.push_back({keys[i], holders[i]});
  }
  return out;
}

Result<engine::RequestId> RoutedEngineImpl::Submit(engine::SubmitRequest request, engine::OutputSink sink) {
  if (request.prompt.empty()) return InvalidArgument("empty prompt");
  std::string constraint;
  if (request.mask) {
    constraint = request.mask->Describe();
    if (constraint.empty()) return Status(StatusCode::kFailedPrecondition, "this constraint cannot be sent to a remote engine");
  }
  auto r = std::make_shared<Routed>();
  r->prompt = std::move(request.prompt);
  r->images = std::move(request.images);
  r->sampling = std::move(request.sampling);
  r->sampling.n = std::max(1, r->sampling.n);
  r->constraint = std::move(constraint);
  r->agent = request.agent_traffic;
  r->sink = std::move(sink);
  r->generated.assign(static_cast<size_t>(r->sampling.n), {});
  r->sample_done.assign(static_cast<size_t>(r->sampling.n), false);
  r->unfinished = r->sampling.n;
  Stage stage = Stage::kSingle;
  {
    std::lock_guard lock(mu_);
    if (shutdown_) return Status(StatusCode::kUnavailable, "the entrypoint is shutting down");
    const bool decode = HasRole(EpRole::kDecode) || HasRole(EpRole::kBoth);
    if (!decode && !HasRole(EpRole::kPrefill)) return Status(StatusCode::kUnavailable, "no engine is alive");
    // PD needs one sample (n > 1 samples share a prefill inside one engine).
    r->pd = HasRole(EpRole::kPrefill) && HasRole(EpRole::kDecode) && r->sampling.n == 1 && r->sampling.max_tokens > 1;
    stage = r->pd ? Stage::kPrefill : Stage::kSingle;
    r->id = next_id_++;
    r->rid = fmt::format("{}-{}", o_.name, r->id);
    reqs_[r->id] = r;
  }
  Dispatch(r, stage, -1);
  return r->id;
}

void RoutedEngineImpl::Dispatch(const std::shared_ptr<Routed>& r, Stage stage, int avoid) {
  std::lock_guard sink_lock(r->sink_mu);
  // The prefix hit, known before routing (the recipe's CHECK role: metadata only): it sets the
  // request's compute-quota, cost(q = uncached, c = cached).
  int64_t cached_tokens = 0;
  if (stage == Stage::kPrefill && o_.store) {
    std::vector<kvcache::ExtraKey> extras;
    {
      std::lock_guard lock(mu_);
      for (const auto& e : eps_) {
        if (e->known && e->role == EpRole::kPrefill && !e->key_extras.empty()) {
          extras = e->key_extras;
          break;
        }
      }
    }
    if (!extras.empty()) {
      const auto keys = kvcache::ChainKeys(std::span<const uint32_t>(r->prompt.data(), r->prompt.size()), extras);
      if (auto hit = o_.store->MatchSync(keys); hit.ok()) cached_tokens = static_cast<int64_t>(*hit) * kvcache::kBlockTokens;
    }
  }
  // The SWA directory, asked before routing and outside mu_: an owner may be another entrypoint.
  auto holders = LookupSwa(*r);
  std::shared_ptr<StreamCall> call;
  const char* fail = nullptr;
  engine::FinishKind fail_kind = engine::FinishKind::kError;
  {
    std::lock_guard lock(mu_);
    if (r->done) return;
    r->swa_holders = std::move(holders);
    if (stage == Stage::kPrefill && !r->cancelled && PrefillRouterReady() && HasRole(EpRole::kPrefill)) {
      // The Prefill Load Balancer queues it; an engine pulls it (now, if one has quota).
      EnqueuePrefill(r, cached_tokens);
      goto pull;
    }
    auto [ep, rank] = Choose(stage, *r, avoid);
    if (ep < 0 && stage == Stage::kPrefill) {
      // No prefill engine: the decode engine prefills itself.
      stage = Stage::kSingle;
      std::tie(ep, rank) = Choose(stage, *r, avoid);
    }
    if (r->cancelled) {
      fail = "";  // cancelled between stages: nothing runs anywhere any more
      fail_kind = engine::FinishKind::kCancelled;
    } else if (ep < 0) {
      fail = "no engine is available for this request";
    } else if (!eps_[static_cast<size_t>(ep)]->ladle_engine && !r->constraint.empty()) {
      fail = "structured output needs a ladle engine";
    } else {
      call = PrepareCall(*r, stage, ep, rank);
    }
  }
  if (fail != nullptr) return FailRequest(r, fail_kind, fail);
  call->Begin();
  return;
pull:
  PumpPrefill();
}

// The stream of one stage on (ep, rank): the prompt plus what was generated before (a decode
// or a re-routed request resumes there), the budget left, and Ladle's extras. Under mu_.
std::shared_ptr<StreamCall> RoutedEngineImpl::PrepareCall(Routed& r, Stage stage, int ep, int rank) {
  Endpoint& e = *eps_[static_cast<size_t>(ep)];
  auto self = reqs_.find(r.id);
  auto call = std::make_shared<StreamCall>(this, self->second, ep, rank, stage);
  pb::GenerateRequest& g = call->req;
  g.set_request_id(fmt::format("{}.{}", r.rid, r.attempts++));
  std::vector<engine::TokenId> tokens = r.prompt;
  const std::vector<uint32_t>& gen = r.generated[0];
  if (r.sampling.n == 1) tokens.insert(tokens.end(), gen.begin(), gen.end());
  for (engine::TokenId t : tokens) g.mutable_tokenized()->add_input_ids(t);
  engine::SamplingParams sp = r.sampling;
  if (r.sampling.n == 1) sp.max_tokens = std::max(0, r.sampling.max_tokens - static_cast<int>(gen.size()));
  if (stage == Stage::kPrefill) sp.max_tokens = 1;
  ToProto(sp, g.mutable_sampling_params());
  // Every stage gets the images: the decode engine keys the prompt's blocks by them (its
  // hand-off finds the prefill's blocks) and replays with them if it falls back.
  if (!r.images.empty()) ImagesToProto(r.images, g.mutable_mm_inputs());
  g.set_stream(true);
  if (e.ladle_engine) {
    LadleExtras x;
    x.constraint = r.constraint;
    if (r.sampling.n == 1) x.prefix_tokens = gen;
    x.agent = r.agent;
    if (stage == Stage::kPrefill) {
      x.swa_anchor_for_len = static_cast<int64_t>(tokens.size()) + 1;  // the fallback's SWA entry
      x.handoff_export = true;
    }
    if (stage == Stage::kDecode && !r.handoff_id.empty() && r.prefill_ep >= 0) {
      // The exact hand-off: the decode engine takes the prefill's state from the prefill engine.
      x.handoff_peer = eps_[static_cast<size_t>(r.prefill_ep)]->address;
      x.handoff_id = std::exchange(r.handoff_id, std::string());
    }
    if (!e.key_extras.empty()) {
      // SWA entries other engines hold for this prefix (a previous turn's, made by the engine
      // that decoded it): the largest two block boundaries, as the directory answered for the
      // tokens this stage is sent (LookupSwa, before routing).
      auto alive_other = [&](const std::string& address) {
        if (address.empty() || address == e.address) return false;
        for (const auto& o : eps_) {
          if (o->address == address) return o->alive && !o->retired;
        }
        return false;
      };
      // The decode's own hit anchor first: the prefill engine holds it, whoever owns the key.
      if (stage == Stage::kDecode && r.anchor_ep >= 0 && alive_other(eps_[static_cast<size_t>(r.anchor_ep)]->address))
        x.swa_peers.push_back({r.anchor_key, eps_[static_cast<size_t>(r.anchor_ep)]->address});
      for (const SwaPeer& h : r.swa_holders) {
        if (x.swa_peers.size() >= 2) break;
        if (!alive_other(h.peer)) continue;
        if (!x.swa_peers.empty() && x.swa_peers[0].key == h.key) continue;
        x.swa_peers.push_back(h);
      }
    }
    g.set_kv_transfer_params_json(ExtrasToJson(x));
  }
  if (rank >= 0) g.set_data_parallel_rank(rank);
  Charge(r, ep, rank, stage);
  r.call = call;
  r.stage = stage;
  e.dispatched++;
  return call;
}

StreamCall::StreamCall(RoutedEngineImpl* eng, std::shared_ptr<Routed> r, int ep, int rank, Stage stage)
    : eng_(eng), r_(std::move(r)), ep_(ep), rank_(rank), stage_(stage) {
  eng_->RpcBegin();
}

StreamCall::~StreamCall() { eng_->RpcEnd(); }

void StreamCall::Begin() {
  self_ = shared_from_this();
  eng_->Stub(ep_)->async()->Generate(&ctx, &req, this);
  StartRead(&resp_);
  StartCall();
}

void StreamCall::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows with the status
  eng_->OnResponse(r_, this, resp_);
  StartRead(&resp_);
}

void StreamCall::OnDone(const grpc::Status& s) {
  eng_->OnCallDone(r_, this, s);
  self_.reset();  // may delete this
}

void RoutedEngineImpl::OnResponse(const std::shared_ptr<Routed>& r, StreamCall* call, const pb::GenerateResponse& m) {
  std::lock_guard sink_lock(r->sink_mu);
  engine::Output out;
  bool deliver = false;
  {
    std::lock_guard lock(mu_);
    if (r->done || r->call.get() != call) return;
    out.id = r->id;
    out.prompt_tokens = static_cast<int64_t>(r->prompt.size());
    if (m.has_chunk()) {
      const pb::GenerateStreamChunk& c = m.chunk();
      const size_t idx = c.index();
      if (idx >= r->generated.size()) return;
      if (!r->cached_known) {
        r->cached_tokens = c.cached_tokens();
        r->cached_known = true;
      }
      out.cached_tokens = r->cached_tokens;
      for (int i = 0; i < c.token_ids_size(); ++i) {
        engine::TokenEvent t;
        t.index = static_cast<int>(idx);
        t.token = c.token_ids(i);
        if (c.has_output_logprobs()) ReadLogprob(c.output_logprobs(), i, &t);
        r->generated[idx].push_back(t.token);
        out.tokens.push_back(std::move(t));
      }
      generated_ += out.tokens.size();
      if (r->awaiting_first_decode && call->stage() != Stage::kPrefill && !out.tokens.empty()) {
        r->awaiting_first_decode = false;
        const double s = static_cast<double>(SteadyUs() - r->prefill_done_us) * 1e-6;
        handoff_ms_.push_back(s * 1e3);
        if (handoff_ms_.size() > 4096) handoff_ms_.pop_front();
        const auto& bounds = engine::kHandoffLatencyBoundsS;
        handoff_buckets_[static_cast<size_t>(std::lower_bound(std::begin(bounds), std::end(bounds), s) - std::begin(bounds))]++;
        handoff_seconds_ += s;
      }
      deliver = !out.tokens.empty();
    } else if (m.has_complete()) {
      const pb::GenerateComplete& c = m.complete();
      const size_t idx = c.index();
      if (idx >= r->generated.size() || r->sample_done[idx]) return;
      const engine::FinishKind kind = FinishFromProto(c);
      if (call->stage() == Stage::kPrefill && kind == engine::FinishKind::kLength &&
          static_cast<int>(r->generated[0].size()) < r->sampling.max_tokens) {
        // The prefill's one token is out: the rest is the decode engine's (after OnDone).
        r->prefill_done_us = SteadyUs();
        r->prefill_ep = call->ep();
        if (c.has_kv_transfer_params_json()) {
          if (auto x = ExtrasFromJson(c.kv_transfer_params_json()); x.ok()) r->handoff_id = x->handoff_id;
        }
        LeavePrefill(*r);
        return;
      }
      if (!r->cached_known) {
        r->cached_tokens = c.cached_tokens();
        r->cached_known = true;
      }
      out.cached_tokens = r->cached_tokens;
      out.finished = true;
      out.finished_index = static_cast<int>(idx);
      out.finish = kind;
      if (c.has_matched_stop_str()) out.stop_matched = c.matched_stop_str();
      r->sample_done[idx] = true;
      if (--r->unfinished <= 0) {
        r->done = true;
        Uncharge(*r);
        reqs_.erase(r->id);
      }
      deliver = true;
    }
  }
  if (deliver) r->sink(out);
}

void RoutedEngineImpl::OnCallDone(const std::shared_ptr<Routed>& r, StreamCall* call, const grpc::Status& s) {
  std::unique_lock sink_lock(r->sink_mu);
  enum { kNothing, kHandoff, kReroute, kFail, kCancel } next = kNothing;
  std::string why;
  int avoid = call->ep();
  Stage stage = Stage::kSingle;
  {
    std::lock_guard lock(mu_);
    if (r->call.get() != call) return;
    r->call.reset();
    Uncharge(*r);
    if (call->stage() == Stage::kPrefill) LeavePrefill(*r);
    const bool dead = call->engine_dead.load() || s.error_code() == grpc::StatusCode::UNAVAILABLE;
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      // The stream broke (a killed engine resets its connections): dead now, not at the next poll.
      Endpoint& e = *eps_[static_cast<size_t>(call->ep())];
      if (e.alive) {
        e.alive = false;
        LADLE_LOG_WARN("cluster.engine_dead address={} reason=\"stream: {}\"", e.address, s.error_message());
      }
    }
    if (r->done) return;
    if (r->cancelled) {
      next = kCancel;
    } else if (s.ok() && call->stage() == Stage::kPrefill && r->prefill_ep >= 0) {
      next = kHandoff;
    } else {
      const bool retry_code = dead || s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                              s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || s.ok();
      // n > 1: the samples' tokens cannot be resumed as one prompt; only an untouched request moves.
      bool untouched = true;
      for (const auto& g : r->generated) untouched = untouched && g.empty();
      if (retry_code && (r->sampling.n == 1 || untouched) && r->attempts <= o_.max_reroutes) {
        next = kReroute;
        reroutes_++;
        stage = r->pd && r->generated[0].empty() ? Stage::kPrefill : (r->pd ? Stage::kDecode : Stage::kSingle);
        LADLE_LOG_WARN("cluster.reroute request={} from={} generated={} status=\"{}\"", r->rid,
                       eps_[static_cast<size_t>(call->ep())]->address, r->generated[0].size(), s.error_message());
      } else {
        next = kFail;
        why = s.ok() ? "the engine ended the stream early" : s.error_message();
      }
    }
  }
  if (call->stage() == Stage::kPrefill) PumpPrefill();  // its quota left: queued prefills may fit now
  switch (next) {
    case kHandoff: StartHandoff(r); break;
    case kReroute: Dispatch(r, stage, avoid); break;
    case kFail: FailRequest(r, engine::FinishKind::kError, why); break;
    case kCancel: FailRequest(r, engine::FinishKind::kCancelled, ""); break;
    case kNothing: break;
  }
}

// The prefill is done: the decode engine will hit the blocks up to L1 of prompt + first token
// (the hit policy's cap). It starts once the store shows them (bounded wait), with the
// prefill engine named as the holder of the SWA entry at L1.
void RoutedEngineImpl::StartHandoff(const std::shared_ptr<Routed>& r) {
  std::vector<kvcache::BlockKey> keys;
  {
    std::lock_guard lock(mu_);
    if (r->done) return;
    handoffs_++;
    r->awaiting_first_decode = true;
    const Endpoint& p = *eps_[static_cast<size_t>(r->prefill_ep)];
    std::vector<engine::TokenId> tokens = r->prompt;
    tokens.insert(tokens.end(), r->generated[0].begin(), r->generated[0].end());
    const int64_t ring = p.swa_window + p.swa_rollback;
    const int64_t len = static_cast<int64_t>(tokens.size());
    const int64_t l1 = len > ring ? (len - ring) / p.block_size * p.block_size : 0;
    if (!p.key_extras.empty()) {
      // The decode engine needs every full block of the prompt (exact hand-off), or those up to
      // L1 (the hit path). One chain over the longer of the two serves both.
      const int64_t need = r->handoff_id.empty() ? l1 : static_cast<int64_t>(r->prompt.size()) / p.block_size * p.block_size;
      tokens.resize(static_cast<size_t>(std::max(need, l1)));
      keys = KeysFor(p, tokens);
      // The fallback's SWA entry (at the decode's hit anchor) is on the prefill engine.
      if (l1 > 0) {
        r->anchor_key = keys[static_cast<size_t>(l1 / p.block_size) - 1];
        r->anchor_ep = r->prefill_ep;
        dir_->Record(r->anchor_key, p.address, SteadyMs() + 180'000);
      }
      keys.resize(static_cast<size_t>(need / p.block_size));
    }
    if (o_.store && !keys.empty()) {
      handoffs_waiting_.push_back({r, std::move(keys), SteadyMs() + o_.handoff_wait_ms});
      cv_.notify_all();
      return;
    }
  }
  Dispatch(r, Stage::kDecode, -1);
}

void RoutedEngineImpl::FailRequest(const std::shared_ptr<Routed>& r, engine::FinishKind kind, const std::string& msg) {
  std::lock_guard sink_lock(r->sink_mu);
  std::vector<engine::Output> outs;
  {
    std::lock_guard lock(mu_);
    if (r->done) return;
    r->done = true;
    Uncharge(*r);
    LeavePrefill(*r);
    reqs_.erase(r->id);
    for (size_t i = 0; i < r->sample_done.size(); ++i) {
      if (r->sample_done[i]) continue;
      engine::Output o;
      o.id = r->id;
      o.finished = true;
      o.finished_index = static_cast<int>(i);
      o.finish = kind;
      o.error = msg;
      o.prompt_tokens = static_cast<int64_t>(r->prompt.size());
      o.cached_tokens = r->cached_tokens;
      outs.push_back(std::move(o));
    }
  }
  if (kind == engine::FinishKind::kError) LADLE_LOG_WARN("cluster.request_failed request={} error=\"{}\"", r->rid, msg);
  for (const auto& o : outs) r->sink(o);
}

void RoutedEngineImpl::Cancel(engine::RequestId id) {
  std::shared_ptr<Routed> r;
  std::shared_ptr<StreamCall> call;
  {
    std::lock_guard lock(mu_);
    auto it = reqs_.find(id);
    if (it == reqs_.end()) return;
    r = it->second;
    r->cancelled = true;
    call = r->call;
  }
  // The engine sees the stream reset and cancels its request (freeing its KV); OnDone then
  // finishes ours. Between stages there is no stream: finish now.
  if (call) {
    call->ctx.TryCancel();
  } else {
    FailRequest(r, engine::FinishKind::kCancelled, "");
  }
}

}  // namespace ladle::cluster
