#include "commands/compare.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <memory>

namespace ablate::cli {
namespace {

// "-0.0123 [-0.0201, -0.0045]", or the delta alone with "(n < 3: no interval)".
std::string FormatDelta(const v1::CompareRow& r) {
  if (r.test() == "none") return "-";
  const int d = std::fabs(r.delta()) >= 100 ? 2 : 4;
  std::string s = FormatFixed(r.delta(), d);
  if (r.has_interval()) {
    s += " [" + FormatFixed(r.ci_low(), d) + ", " + FormatFixed(r.ci_high(), d) + "]";
  } else {
    s += " (no interval: n < 3)";
  }
  return s;
}

// "4 (1 diverged, 1 failed)": the seeds of a level and what happened to those not complete.
std::string FormatSeeds(int seeds, int diverged, int failed, int missing, int stopped) {
  std::string s = std::to_string(seeds);
  std::string extra;
  if (diverged > 0) extra += std::to_string(diverged) + " diverged";
  if (failed > 0) extra += (extra.empty() ? "" : ", ") + std::to_string(failed) + " failed";
  if (stopped > 0) extra += (extra.empty() ? "" : ", ") + std::to_string(stopped) + " stopped";
  if (missing > 0) extra += (extra.empty() ? "" : ", ") + std::to_string(missing) + " pending";
  return extra.empty() ? s : s + " (" + extra + ")";
}

// A verdict that never reads a direction into an interval that includes 0.
std::string Verdict(const v1::CompareRow& r) {
  if (r.test() == "none") return "no pairs";
  if (r.delta() == 0 && r.ci_low() == 0 && r.ci_high() == 0 && r.has_interval()) {
    return "no difference";
  }
  if (!r.has_interval()) return "too few seeds";
  if (r.ci_low() > 0 || r.ci_high() < 0) {
    return r.p_adjusted() < 0.05 ? (r.delta() > 0 ? "higher" : "lower")
                                 : (r.delta() > 0 ? "higher (not after Holm)"
                                                  : "lower (not after Holm)");
  }
  return "no detectable difference";
}

}  // namespace

Table CompareTable(const v1::CompareResponse& resp) {
  Table t;
  for (const std::string& axis : resp.by()) t.AddColumn(axis);
  t.AddColumn(resp.factor(), "value");
  t.AddColumn("baseline", "baseline", Column::Show::kMachineOnly);
  const bool best_over = !resp.best_over().empty();
  bool mixed = false;
  for (const v1::CompareRow& r : resp.rows()) mixed |= r.builds() > 1 || r.baseline_builds() > 1;
  if (best_over) {
    t.AddColumn("best " + resp.best_over(), "best_value");
    t.AddColumn("baseline's best", "baseline_best_value");
  }
  t.AddColumn("metric", "metric", Column::Show::kMachineOnly);
  t.AddColumn("n", "n").align = Column::Align::kRight;
  t.AddColumn("mean", "mean").align = Column::Align::kRight;
  t.AddColumn("baseline mean", "baseline_mean").align = Column::Align::kRight;
  t.AddColumn("delta [95% CI]", "", Column::Show::kTextOnly).align = Column::Align::kRight;
  for (const char* f : {"delta", "ci_low", "ci_high"}) t.AddColumn(f, f, Column::Show::kMachineOnly);
  t.AddColumn("p", "p_value").align = Column::Align::kRight;
  t.AddColumn("p sign-flip", "p_permutation").align = Column::Align::kRight;
  t.AddColumn("p Holm", "p_adjusted").align = Column::Align::kRight;
  t.AddColumn("seeds", "", Column::Show::kTextOnly);
  t.AddColumn("baseline seeds", "", Column::Show::kTextOnly);
  for (const char* f : {"diverged", "failed", "missing", "stopped", "baseline_diverged",
                        "baseline_failed", "baseline_missing", "baseline_stopped", "left_out"}) {
    t.AddColumn(f, f, Column::Show::kMachineOnly);
  }
  const auto builds_shown = mixed ? Column::Show::kAll : Column::Show::kMachineOnly;
  t.AddColumn("builds", "builds", builds_shown);
  t.AddColumn("baseline builds", "baseline_builds", builds_shown);
  t.AddColumn("test", "test");
  t.AddColumn("verdict", "verdict");
  for (const v1::CompareRow& r : resp.rows()) {
    std::vector<Cell> row;
    for (int k = 0; k < resp.by_size(); ++k) {
      row.push_back(k < r.cell_size() ? Cell::Text(r.cell(k)) : Cell());
    }
    const bool has = r.test() != "none";
    row.push_back(Cell::Text(r.value()));
    row.push_back(Cell::Text(r.baseline()));
    if (best_over) {
      row.push_back(r.best_value().empty() ? Cell() : Cell::Text(r.best_value()));
      row.push_back(r.baseline_best_value().empty() ? Cell() : Cell::Text(r.baseline_best_value()));
    }
    row.push_back(Cell::Text(resp.metric()));
    row.push_back(Cell::Int(r.n()));
    row.push_back(has ? Cell::Real(r.mean()) : Cell());
    row.push_back(has ? Cell::Real(r.baseline_mean()) : Cell());
    row.push_back(Cell::Text(FormatDelta(r)));
    row.push_back(has ? Cell::Real(r.delta()) : Cell());
    row.push_back(r.has_interval() ? Cell::Real(r.ci_low()) : Cell());
    row.push_back(r.has_interval() ? Cell::Real(r.ci_high()) : Cell());
    if (has) {
      row.push_back(Cell::Real(r.p_value(), 4));
      row.push_back(r.test() == "paired-t" ? Cell::Real(r.p_permutation(), 4)
                                           : Cell());
      row.push_back(Cell::Real(r.p_adjusted(), 4));
    } else {
      row.push_back(Cell());
      row.push_back(Cell());
      row.push_back(Cell());
    }
    row.push_back(
        Cell::Text(FormatSeeds(r.seeds(), r.diverged(), r.failed(), r.missing(), r.stopped())));
    row.push_back(Cell::Text(FormatSeeds(r.baseline_seeds(), r.baseline_diverged(),
                                         r.baseline_failed(), r.baseline_missing(),
                                         r.baseline_stopped())));
    for (int v : {r.diverged(), r.failed(), r.missing(), r.stopped(), r.baseline_diverged(),
                  r.baseline_failed(), r.baseline_missing(), r.baseline_stopped(), r.left_out()}) {
      row.push_back(Cell::Int(v));
    }
    row.push_back(Cell::Int(r.builds()));
    row.push_back(Cell::Int(r.baseline_builds()));
    row.push_back(Cell::Text(r.test()));
    row.push_back(Cell::Text(Verdict(r)));
    t.AddRow(std::move(row));
  }
  return t;
}

Status ShowCompare(Client& client, const CompareOptions& options, const Io& io) {
  v1::CompareRequest req;
  ABLATE_ASSIGN_OR_RETURN(std::string sweep, ParseSweepRef(options.sweep));
  req.set_sweep(sweep);
  req.set_factor(options.factor);
  req.set_baseline(options.baseline);
  req.set_metric(options.metric);
  for (const std::string& axis : options.by) req.add_by(axis);
  req.set_best_over(options.best_over);
  for (const std::string& s : options.select_seeds) req.add_select_seeds(s);
  v1::CompareResponse resp;
  ABLATE_RETURN_IF_ERROR(client.Call(&v1::ControlService::StubInterface::Compare, req, &resp));
  *io.out << Render(CompareTable(resp), options.format);
  if (options.format == Format::kTable) {
    if (resp.rows().empty()) {
      *io.err << "nothing to compare: sweep " << options.sweep << " has no level of "
              << resp.factor() << " besides the baseline " << resp.baseline() << "\n";
      return Status::Ok();
    }
    int left_out = 0, diverged = 0;
    bool unpaired = false;
    for (const v1::CompareRow& r : resp.rows()) {
      left_out += r.left_out();
      diverged += r.diverged() + r.baseline_diverged();
      unpaired |= r.test() == "welch-t";
    }
    *io.out << resp.metric() << ": each " << resp.factor() << " against " << resp.baseline()
            << ", paired by seed (delta = value - baseline); p Holm adjusts over the "
            << resp.rows_size() << " comparison" << (resp.rows_size() == 1 ? "" : "s")
            << " above\n";
    if (unpaired) *io.out << "welch-t: no seed in common with the baseline, compared unpaired\n";
    if (left_out > 0) {
      *io.out << left_out << " seed" << (left_out == 1 ? "" : "s")
              << " left out of the pairs (diverged, failed, pending or unmatched: see seeds)\n";
    }
    if (diverged > 0) *io.out << "a level with a diverged seed may be the finding: see seeds\n";
    bool mixed = false;
    for (const v1::CompareRow& r : resp.rows()) mixed |= r.builds() > 1 || r.baseline_builds() > 1;
    if (mixed) {
      *io.out << "builds > 1: a level's values come from different builds of the trainer "
                 "(ablate export shows which)\n";
    }
    if (!resp.best_over().empty()) {
      *io.out << "each level at its own best " << resp.best_over() << " (best " << resp.best_over()
              << ", chosen by the mean of " << resp.metric() << ")";
      if (resp.optimistic()) {
        *io.out << ", chosen and tested on the same seeds: optimistic (the chosen value's "
                   "luck is in the difference); choose on some seeds with --select-seeds\n";
      } else {
        std::string seeds;
        for (const std::string& s : resp.test_seeds()) seeds += (seeds.empty() ? "" : ",") + s;
        *io.out << " on the --select-seeds, tested on seeds " << seeds << "\n";
      }
    }
  }
  return Status::Ok();
}

void AddCompareCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<CompareOptions>();
  auto format = std::make_shared<std::string>("table");
  CLI::App* sub = app.add_subcommand(
      "compare", "Each level of a factor against a baseline, paired by seed, with intervals");
  sub->add_option("sweep", opts->sweep, "Sweep name or sweep:ID")->required();
  sub->add_option("--factor", opts->factor, "The axis whose levels are compared")->required();
  sub->add_option("--baseline", opts->baseline, "The level compared against (default: the first)");
  sub->add_option("--metric", opts->metric, "Metric to compare")->default_str("final_val_loss");
  sub->add_option("--by", opts->by, "Axes whose cells are compared apart")->delimiter(',');
  sub->add_option("--best-over", opts->best_over,
                  "Compare each level at its own best value of this axis (e.g. optimizer.lr)");
  sub->add_option("--select-seeds", opts->select_seeds,
                  "Seeds that choose the best value; the others test it (default: all, optimistic)")
      ->delimiter(',');
  AddFormatOption(sub, format.get());
  sub->callback([opts, format, selected] {
    *selected = [opts, format](CommandEnv& env) -> Status {
      opts->format = *ParseFormat(*format);
      ABLATE_RETURN_IF_ERROR(ParseSweepRef(opts->sweep).status());  // before any connection
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return ShowCompare(*client, *opts, env.io);
    };
  });
}

}  // namespace ablate::cli
