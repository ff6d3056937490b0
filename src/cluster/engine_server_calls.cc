// One Generate call's path on the engine server, after admission (engine_server.cc): the SWA
// entry fetched from a peer engine, the constraint's mask, the submit to a DP rank, the
// outputs relayed to the call's stream, finish and cancel.
#include "engine_server_impl.h"

namespace ladle::cluster::engine_server_detail {

lrpc::LadleEngine::Stub* EngineServerImpl::PeerStub(const std::string& addr) {
  std::lock_guard lock(peers_mu_);
  auto& s = peers_[addr];
  if (!s) s = lrpc::LadleEngine::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  return s.get();
}

// SWA entries the entrypoint says a peer holds and this pool lacks are fetched first, so the
// hit policy finds them (recipe "SWA KVCache": on a hit with no local copy it's fetched
// cross-machine). A fetch that fails or times out leaves a miss: the window is replayed.
void EngineServerImpl::FetchSwaThenSubmit(std::shared_ptr<Call> c) {
  if (!c->extras.handoff_id.empty() && !c->resume) {
    // PD: the prefill engine's exported state, engine to engine. Without it (gone, late, a
    // different model) the request takes the ordinary hit path below.
    auto ctx = std::make_shared<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o_.swa_fetch_timeout_ms));
    auto req = std::make_shared<lrpc::HandoffFetchRequest>();
    auto resp = std::make_shared<lrpc::HandoffFetchResponse>();
    req->set_request_id(c->extras.handoff_id);
    PeerStub(c->extras.handoff_peer)
        ->async()
        ->HandoffFetch(ctx.get(), req.get(), resp.get(), [this, c, ctx, req, resp, tok = PeerRpcToken()](grpc::Status st) {
          if (st.ok() && resp->found()) {
            auto h = engine::DecodeHandoff(
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(resp->state().data()), resp->state().size()));
            if (h.ok()) {
              c->resume = std::make_shared<const engine::HandoffState>(std::move(h).value());
            } else {
              LADLE_LOG_WARN("engine_server.handoff_bad error=\"{}\"", h.status().ToString());
            }
          } else {
            LADLE_LOG_WARN("engine_server.handoff_missing peer={} found={} error=\"{}\"", c->extras.handoff_peer,
                           resp->found(), st.error_message());
          }
          c->extras.handoff_id.clear();
          FetchSwaThenSubmit(c);
        });
    return;
  }
  std::vector<SwaPeer> want;
  if (o_.swa_pool) {
    const int64_t now = NowMs();
    for (const SwaPeer& p : c->extras.swa_peers) {
      if (!o_.swa_pool->Contains(p.key, now)) want.push_back(p);
    }
  }
  if (want.empty()) return BuildMaskThenSubmit(std::move(c));
  struct Pending {
    std::mutex mu;
    int left = 0;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = static_cast<int>(want.size());
  for (const SwaPeer& p : want) {
    auto ctx = std::make_shared<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o_.swa_fetch_timeout_ms));
    auto req = std::make_shared<lrpc::SwaFetchRequest>();
    auto resp = std::make_shared<lrpc::SwaFetchResponse>();
    req->set_key_hi(p.key.hi);
    req->set_key_lo(p.key.lo);
    PeerStub(p.peer)->async()->SwaFetch(ctx.get(), req.get(), resp.get(),
                                        [this, c, pending, ctx, req, resp, key = p.key, peer = p.peer,
                                         tok = PeerRpcToken()](grpc::Status st) {
                                          if (st.ok() && resp->found()) {
                                            std::vector<uint8_t> ring(resp->ring().begin(), resp->ring().end());
                                            o_.swa_pool->Put(key, resp->anchor(), std::move(ring), NowMs());
                                          } else {
                                            LADLE_LOG_INFO("engine_server.swa_fetch_miss peer={} found={} error=\"{}\"", peer,
                                                           resp->found(), st.error_message());
                                          }
                                          bool last = false;
                                          {
                                            std::lock_guard lock(pending->mu);
                                            last = --pending->left == 0;
                                          }
                                          if (last) BuildMaskThenSubmit(c);
                                        });
  }
}

void EngineServerImpl::BuildMaskThenSubmit(std::shared_ptr<Call> c) {
  if (!c->has_constraint) return Submit(std::move(c), nullptr);
  if (!o_.mask_factory) {
    return FinishCall(c, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "structured output is not available"));
  }
  o_.mask_factory(c->constraint, [this, c](Result<std::shared_ptr<engine::MaskProvider>> m) {
    if (!m.ok()) return FinishCall(c, ToGrpc(m.status()));
    // A re-routed request resumes its grammar where the first engine left it.
    for (uint32_t t : c->extras.prefix_tokens) (*m)->Accept(0, t);
    Submit(c, std::move(m).value());
  });
}

int EngineServerImpl::PickRank(int requested) {
  if (requested >= 0) return requested;
  std::lock_guard lock(load_mu_);
  int best = 0;
  for (int i = 1; i < static_cast<int>(loads_.size()); ++i) {
    const RankLoad& a = loads_[static_cast<size_t>(i)];
    const RankLoad& b = loads_[static_cast<size_t>(best)];
    if (a.quota_ns < b.quota_ns || (a.quota_ns == b.quota_ns && a.requests < b.requests)) best = i;
  }
  return best;
}

void EngineServerImpl::Submit(std::shared_ptr<Call> c, std::shared_ptr<engine::MaskProvider> mask) {
  {
    std::lock_guard lock(c->mu);
    if (c->cancelled || c->finish_requested) {
      c->finish_requested = true;
      if (c->final_status.ok()) c->final_status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
  }
  Pump(c);
  {
    std::lock_guard lock(c->mu);
    if (c->finish_requested) return;
  }
  const int rank = PickRank(c->dp_rank);
  engine::SubmitRequest r;
  r.prompt = c->prompt;
  r.images = c->images;
  r.sampling = c->sampling;
  r.mask = std::move(mask);
  r.agent_traffic = c->extras.agent;
  r.swa_anchor_for_len = c->extras.swa_anchor_for_len;
  r.handoff_export = c->extras.handoff_export && c->sampling.n == 1 && c->sampling.max_tokens == 1;
  if (c->sampling.n == 1) r.resume = c->resume;
  c->ids.assign(static_cast<size_t>(c->sampling.n), {});
  c->logprobs.assign(static_cast<size_t>(c->sampling.n), {});
  c->unfinished = c->sampling.n;
  c->prompt_tokens = static_cast<int64_t>(c->prompt.size());
  c->quota_ns = o_.info.cost.Cost(static_cast<int64_t>(c->prompt.size()), 0);
  c->kv_tokens = static_cast<int64_t>(c->prompt.size());
  c->rank = rank;
  {
    std::lock_guard lock(load_mu_);
    RankLoad& l = loads_[static_cast<size_t>(rank)];
    l.quota_ns += c->quota_ns;
    l.kv_tokens += c->kv_tokens;
    l.requests += 1;
  }
  auto id = ranks_[static_cast<size_t>(rank)]->Submit(std::move(r), [this, c](const engine::Output& out) { OnOutput(c, out); });
  if (!id.ok()) {
    {
      std::lock_guard lock(c->mu);
      Release(*c);
    }
    return FinishCall(c, ToGrpc(id.status()));
  }
  bool cancel_now = false;
  {
    std::lock_guard lock(c->mu);
    c->eid = *id;
    c->submitted = true;
    cancel_now = c->cancelled;
  }
  if (cancel_now) ranks_[static_cast<size_t>(rank)]->Cancel(*id);
}

// Load bookkeeping of the rank; under c.mu, once.
void EngineServerImpl::Release(Call& c) {
  if (c.released || c.rank < 0) return;
  c.released = true;
  std::lock_guard lock(load_mu_);
  RankLoad& l = loads_[static_cast<size_t>(c.rank)];
  if (!c.prefill_done) l.quota_ns -= c.quota_ns;
  l.kv_tokens -= c.kv_tokens;
  l.requests -= 1;
  if (l.requests == 0) l.quota_ns = 0, l.kv_tokens = 0;  // no drift from float sums
}

void EngineServerImpl::OnOutput(const std::shared_ptr<Call>& c, const engine::Output& out) {
  bool error = false;
  {
    std::lock_guard lock(c->mu);
    if (!c->prefill_done) {
      // The prompt's prefill is done once anything comes back: its quota leaves the rank.
      c->prefill_done = true;
      std::lock_guard l2(load_mu_);
      if (!c->released) loads_[static_cast<size_t>(c->rank)].quota_ns -= c->quota_ns;
    }
    c->cached_tokens = out.cached_tokens;
    const bool top = c->sampling.top_logprobs > 0;
    const bool lp = c->sampling.top_logprobs >= 0;
    // One chunk per sample index present in this Output.
    std::vector<pb::GenerateStreamChunk*> chunks(c->ids.size(), nullptr);
    std::vector<pb::GenerateResponse> msgs;
    int64_t added = 0;
    for (const engine::TokenEvent& t : out.tokens) {
      const size_t i = static_cast<size_t>(t.index);
      if (i >= c->ids.size()) continue;
      c->ids[i].push_back(t.token);
      ++added;
      if (c->stream) {
        if (chunks[i] == nullptr) {
          msgs.emplace_back();
          chunks[i] = msgs.back().mutable_chunk();
          chunks[i]->set_index(static_cast<uint32_t>(i));
        }
        chunks[i]->add_token_ids(t.token);
        if (lp) AppendLogprob(t, top, chunks[i]->mutable_output_logprobs());
      } else if (lp) {
        AppendLogprob(t, top, &c->logprobs[i]);
      }
    }
    c->kv_tokens += added;
    {
      std::lock_guard l2(load_mu_);
      if (!c->released) loads_[static_cast<size_t>(c->rank)].kv_tokens += added;
    }
    for (pb::GenerateResponse& m : msgs) {
      pb::GenerateStreamChunk* ch = m.mutable_chunk();
      ch->set_prompt_tokens(static_cast<uint32_t>(out.prompt_tokens));
      ch->set_cached_tokens(static_cast<uint32_t>(out.cached_tokens));
      ch->set_completion_tokens(static_cast<uint32_t>(c->ids[ch->index()].size()));
      if (!c->finish_requested) c->queue.push_back(std::move(m));
    }
    if (out.finished) {
      const size_t i = static_cast<size_t>(out.finished_index);
      if (out.finish == engine::FinishKind::kError && !c->finish_requested) {
        c->finish_requested = true;
        c->final_status = grpc::Status(grpc::StatusCode::INTERNAL, out.error.empty() ? "engine error" : out.error);
      }
      if (i < c->ids.size() && !c->finish_requested) {
        pb::GenerateResponse m;
        pb::GenerateComplete* done = m.mutable_complete();
        done->set_index(static_cast<uint32_t>(i));
        done->set_finish_reason(FinishReasonName(out.finish));
        done->set_prompt_tokens(static_cast<uint32_t>(out.prompt_tokens));
        done->set_cached_tokens(static_cast<uint32_t>(out.cached_tokens));
        done->set_completion_tokens(static_cast<uint32_t>(c->ids[i].size()));
        if (out.finish == engine::FinishKind::kStopString) done->set_matched_stop_str(out.stop_matched);
        if (out.finish == engine::FinishKind::kStopToken && !c->ids[i].empty()) done->set_matched_token_id(c->ids[i].back());
        if (out.handoff) {
          KeepHandoff(c->rid, *out.handoff);
          LadleExtras x;
          x.handoff_id = c->rid;
          x.handoff_peer = "";  // this engine: the caller knows its address
          done->set_kv_transfer_params_json(ExtrasToJson(x));
        }
        if (!c->stream) {
          for (uint32_t t : c->ids[i]) done->add_output_ids(t);
          if (lp) *done->mutable_output_logprobs() = c->logprobs[i];
        }
        c->queue.push_back(std::move(m));
      }
      if (--c->unfinished <= 0) {
        Release(*c);
        if (!c->finish_requested) c->finish_requested = true;  // OK: an abort is said in the completes
      }
    }
    error = out.finished && out.finish == engine::FinishKind::kError;
  }
  if (error) CancelCall(c);  // the other samples stop too
  Pump(c);
}

void EngineServerImpl::FinishCall(const std::shared_ptr<Call>& c, grpc::Status st) {
  {
    std::lock_guard lock(c->mu);
    if (!c->finish_requested) {
      c->finish_requested = true;
      c->final_status = std::move(st);
    }
  }
  Pump(c);
}

void EngineServerImpl::CancelCall(const std::shared_ptr<Call>& c) {
  int rank = -1;
  engine::RequestId eid = 0;
  bool not_yet = false;
  {
    std::lock_guard lock(c->mu);
    if (c->cancelled) return;
    c->cancelled = true;
    if (c->submitted) {
      rank = c->rank;
      eid = c->eid;
    } else {
      not_yet = true;  // Submit sees the flag
    }
  }
  if (rank >= 0) ranks_[static_cast<size_t>(rank)]->Cancel(eid);  // its kCancelled finish ends the call
  if (not_yet) FinishCall(c, grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
}

// Starts the next write, or the Finish once the queue is empty. Decided under the call's lock,
// done outside it: a reactor may run a reaction inline.
void EngineServerImpl::Pump(const std::shared_ptr<Call>& c) {
  grpc::ServerWriteReactor<pb::GenerateResponse>* r = nullptr;
  bool write = false, finish = false;
  grpc::Status st;
  {
    std::lock_guard lock(c->mu);
    if (c->reactor == nullptr || c->finished || c->writing) return;
    r = c->reactor;
    if (!c->queue.empty()) {
      c->inflight = std::move(c->queue.front());
      c->queue.pop_front();
      c->writing = true;
      write = true;
    } else if (c->finish_requested) {
      c->finished = true;
      finish = true;
      st = c->final_status;
    }
  }
  if (write) r->StartWrite(&c->inflight);
  if (finish) r->Finish(st);
}


}  // namespace ladle::cluster::engine_server_detail
