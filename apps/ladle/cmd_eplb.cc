// `ladle eplb plan`: an expert placement from per-expert loads, as JSON.
//   ladle eplb plan --loads loads.json --replicas 16 --groups 4 --nodes 2 --gpus 8 [--policy eplb]
// loads.json: [[tokens of expert 0, 1, ...] per layer], or {"loads": [[...], ...]}; an optional
// "previous" next to "loads" (the last re-arrangement's window) feeds the layer budget's
// drift-aware gain. Prints {"policy", "num_physical", "phy2log", "log2phy" (padded with -1 to the
// largest replica count, as DeepSeek's EPLB returns it), "logcnt", "moe_lb": {"before", "after"}},
// where "before" is the contiguous layout without EPLB. docs/eplb.md.
#include <fmt/format.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "commands.h"
#include "ladle/eplb/placement.h"
#include "ladle/json/json.h"

namespace ladle::app {

namespace {

struct EplbPlanOpts {
  std::string loads;
  uint32_t replicas = 0, groups = 1, nodes = 1, gpus = 1;
  std::string policy = "eplb";
};

Result<eplb::ExpertLoads> LoadsFrom(const json::Value& v, std::string_view what) {
  if (!v.is_array()) return InvalidArgument(fmt::format("{}: expected an array of layers", what));
  std::vector<std::vector<double>> rows;
  for (const json::Value& layer : v.as_array()) {
    if (!layer.is_array()) return InvalidArgument(fmt::format("{}: a layer is not an array", what));
    auto& row = rows.emplace_back();
    for (const json::Value& x : layer.as_array()) {
      if (!x.is_number()) return InvalidArgument(fmt::format("{}: a load is not a number", what));
      row.push_back(x.as_double());
    }
  }
  return eplb::ExpertLoads::FromRows(rows);
}

json::Value Ints(const std::vector<int32_t>& v) {
  json::Value::Array a;
  for (int32_t x : v) a.push_back(json::Value::Int(x));
  return json::Value::MakeArray(std::move(a));
}

json::Value MoeLbJson(const eplb::MoeLbSummary& s) {
  json::Value::Array per;
  for (double x : s.per_layer) per.push_back(json::Value::Double(x));
  json::Value out = json::Value::MakeObject();
  out.Set("per_layer", json::Value::MakeArray(std::move(per)));
  out.Set("max", json::Value::Double(s.max));
  out.Set("mean", json::Value::Double(s.mean));
  return out;
}

int RunPlan(const EplbPlanOpts& o) {
  auto fail = [](const Status& s) {
    fmt::print(stderr, "ladle eplb plan: {}\n", s.ToString());
    return 1;
  };
  std::ifstream in(o.loads);
  if (!in) return fail(IoError("cannot read " + o.loads));
  std::stringstream text;
  text << in.rdbuf();
  auto doc = json::Parse(text.str());
  if (!doc.ok()) return fail(doc.status());
  const json::Value* loads_v = doc->is_object() ? doc->Find("loads") : &*doc;
  if (loads_v == nullptr) return fail(InvalidArgument("loads file: no \"loads\" member"));
  auto loads = LoadsFrom(*loads_v, "loads");
  if (!loads.ok()) return fail(loads.status());
  std::optional<eplb::ExpertLoads> previous;
  if (const json::Value* prev_v = doc->is_object() ? doc->Find("previous") : nullptr) {
    auto p = LoadsFrom(*prev_v, "previous");
    if (!p.ok()) return fail(p.status());
    previous = std::move(*p);
  }
  auto policy = eplb::ParsePlacementPolicy(o.policy);
  if (!policy.ok()) return fail(policy.status());
  const eplb::PlacementConfig cfg{.num_physical = o.replicas, .num_groups = o.groups, .num_nodes = o.nodes,
                                  .num_ranks = o.gpus};
  auto placement = *policy == eplb::PlacementPolicy::kLayerBudget
                       ? eplb::RebalanceWithLayerBudget(*loads, cfg, {}, previous ? &*previous : nullptr)
                       : eplb::RebalanceExperts(*loads, cfg);
  if (!placement.ok()) return fail(placement.status());
  if (Status s = eplb::ValidatePlacement(*placement, loads->experts()); !s.ok()) return fail(s);

  size_t max_cnt = 1;
  for (const auto& layer : placement->layers) {
    for (int32_t c : layer.logcnt) max_cnt = std::max<size_t>(max_cnt, static_cast<size_t>(c));
  }
  json::Value::Array num_physical, phy2log, log2phy, logcnt;
  for (const auto& layer : placement->layers) {
    num_physical.push_back(json::Value::Int(static_cast<int64_t>(layer.phy2log.size())));
    phy2log.push_back(Ints(layer.phy2log));
    json::Value::Array experts;
    for (auto slots : layer.log2phy) {
      slots.resize(max_cnt, -1);
      experts.push_back(Ints(slots));
    }
    log2phy.push_back(json::Value::MakeArray(std::move(experts)));
    logcnt.push_back(Ints(layer.logcnt));
  }
  json::Value moe_lb = json::Value::MakeObject();
  moe_lb.Set("before", MoeLbJson(eplb::MeasureMoeLbWithoutEplb(*loads, o.gpus)));
  moe_lb.Set("after", MoeLbJson(eplb::MeasureMoeLb(*placement, *loads)));
  json::Value out = json::Value::MakeObject();
  out.Set("policy", json::Value::String(std::string(eplb::PlacementPolicyName(*policy))));
  out.Set("num_physical", json::Value::MakeArray(std::move(num_physical)));
  out.Set("phy2log", json::Value::MakeArray(std::move(phy2log)));
  out.Set("log2phy", json::Value::MakeArray(std::move(log2phy)));
  out.Set("logcnt", json::Value::MakeArray(std::move(logcnt)));
  out.Set("moe_lb", std::move(moe_lb));
  fmt::print("{}\n", json::Dump(out, json::Style::kPython));
  return 0;
}

void RegisterEplb(CLI::App& app, RunFn* run) {
  auto* cmd = app.add_subcommand("eplb", "Expert-parallel load balancing");
  cmd->require_subcommand(1);
  auto opts = std::make_shared<EplbPlanOpts>();
  auto* plan = cmd->add_subcommand("plan", "Expert placement (phy2log, log2phy, logcnt) and moe_lb from loads");
  plan->add_option("--loads", opts->loads, "JSON file: per-layer, per-expert loads")->required();
  plan->add_option("--replicas", opts->replicas, "physical experts per layer (a multiple of --gpus)")->required();
  plan->add_option("--groups", opts->groups, "expert groups")->capture_default_str();
  plan->add_option("--nodes", opts->nodes, "nodes")->capture_default_str();
  plan->add_option("--gpus", opts->gpus, "GPUs (EP ranks)")->capture_default_str();
  plan->add_option("--policy", opts->policy, "eplb or layer-budget")
      ->capture_default_str()->check(CLI::IsMember({"eplb", "layer-budget"}));
  plan->callback([run, opts] { *run = [opts] { return RunPlan(*opts); }; });
}

}  // namespace

LADLE_REGISTER_COMMAND(RegisterEplb);

}  // namespace ladle::app
