#include "commands/results.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

namespace ablate::cli {
namespace {

int DecimalsFor(double mean) {
  const double a = std::fabs(mean);
  if (a >= 10000) return 0;
  if (a >= 1000) return 1;
  if (a >= 100) return 2;
  return 4;
}

}  // namespace

int BestRow(const v1::ResultsResponse& resp) {
  for (int i = 0; i < resp.rows_size(); ++i) {
    if (resp.rows(i).best()) return i;
  }
  return -1;
}

std::string FormatMeanSe(const v1::ResultsRow& row) {
  if (row.n() <= 0 || !std::isfinite(row.mean())) return "-";
  const int decimals = DecimalsFor(row.mean());
  std::string s = FormatFixed(row.mean(), decimals);
  s += std::isfinite(row.se()) ? " ± " + FormatFixed(row.se(), decimals) : " ± -";
  s += " (" + std::to_string(row.n());
  if (row.trials() > row.n()) s += "/" + std::to_string(row.trials());
  return s + ")";
}

std::string FormatInterval(const v1::ResultsRow& row) {
  if (row.n() <= 0 || !std::isfinite(row.ci_low())) return "-";
  const int decimals = DecimalsFor(row.mean());
  return "[" + FormatFixed(row.ci_low(), decimals) + ", " + FormatFixed(row.ci_high(), decimals) +
         "]";
}

Table ResultsTable(const v1::ResultsResponse& resp) {
  bool diverged = false, failed = false, stopped = false, mixed = false;
  for (const v1::ResultsRow& r : resp.rows()) {
    diverged |= r.diverged() > 0;
    failed |= r.failed() > 0;
    stopped |= r.stopped() > 0;
    mixed |= r.builds() > 1;
  }
  // In the text, the counts only when some cell has them; the machine formats always.
  auto shown = [](bool any) { return any ? Column::Show::kAll : Column::Show::kMachineOnly; };
  Table t;
  t.AddColumn("", "", Column::Show::kTextOnly);  // the best-row marker
  for (const std::string& axis : resp.by()) t.AddColumn(axis);
  t.AddColumn("metric", "metric", Column::Show::kMachineOnly);
  t.AddColumn(resp.metric() + " mean ± se (n)", "", Column::Show::kTextOnly).align =
      Column::Align::kRight;
  t.AddColumn("95% CI", "", Column::Show::kTextOnly).align = Column::Align::kRight;
  for (const char* field : {"mean", "std", "se", "ci_low", "ci_high", "n", "trials", "min", "max"}) {
    t.AddColumn(field, field, Column::Show::kMachineOnly);
  }
  t.AddColumn("diverged", "diverged", shown(diverged));
  t.AddColumn("failed", "failed", shown(failed));
  t.AddColumn("stopped", "stopped", shown(stopped));
  t.AddColumn("builds", "builds", shown(mixed));
  t.AddColumn("best", "best", Column::Show::kMachineOnly);
  for (int i = 0; i < resp.rows_size(); ++i) {
    const v1::ResultsRow& r = resp.rows(i);
    std::vector<Cell> row{Cell::Text(r.best() ? "*" : (r.diverged() > 0 ? "!" : ""))};
    for (int k = 0; k < resp.by_size(); ++k) {
      row.push_back(k < r.keys_size() ? Cell::Text(r.keys(k)) : Cell());
    }
    row.push_back(Cell::Text(resp.metric()));
    row.push_back(Cell::Text(FormatMeanSe(r)));
    row.push_back(Cell::Text(FormatInterval(r)));
    const bool has = r.n() > 0;
    auto real = [](double v) { return std::isfinite(v) ? Cell::Real(v) : Cell(); };
    row.push_back(has ? real(r.mean()) : Cell());
    row.push_back(has ? real(r.std()) : Cell());
    row.push_back(has ? real(r.se()) : Cell());
    row.push_back(has ? real(r.ci_low()) : Cell());
    row.push_back(has ? real(r.ci_high()) : Cell());
    row.push_back(Cell::Int(r.n()));
    row.push_back(Cell::Int(r.trials()));
    row.push_back(has ? real(r.min()) : Cell());
    row.push_back(has ? real(r.max()) : Cell());
    row.push_back(Cell::Int(r.diverged()));
    row.push_back(Cell::Int(r.failed()));
    row.push_back(Cell::Int(r.stopped()));
    row.push_back(Cell::Int(r.builds()));
    row.push_back(Cell::Bool(r.best()));
    t.AddRow(std::move(row));
  }
  return t;
}

// The metric names the trials of a sweep (a name, or an id as ParseSweepRef gives it) have
// reported, comma-separated; "" when there are none or the query fails.
std::string ReportedMetrics(Client& client, const std::string& sweep) {
  std::string quoted = "'";
  for (char c : sweep) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  quoted += "'";
  v1::QueryRequest req;
  req.set_sql(
      "SELECT DISTINCT l.name FROM latest_metrics l JOIN trials t ON t.id = l.trial_id "
      "WHERE t.sweep_id IN (SELECT id FROM sweeps WHERE name = " +
      quoted + " OR CAST(id AS TEXT) = " + quoted + ") ORDER BY 1");
  req.set_max_rows(40);
  v1::QueryResponse resp;
  if (!client.Call(&v1::ControlService::StubInterface::Query, req, &resp).ok()) return "";
  std::string names;
  for (const v1::QueryRow& r : resp.rows()) {
    if (r.values_size() == 1 && r.values(0).has_text()) {
      names += (names.empty() ? "" : ", ") + r.values(0).text();
    }
  }
  return names + (resp.truncated() ? ", ..." : "");
}

Status ShowResults(Client& client, const ResultsOptions& options, const Io& io) {
  v1::ResultsRequest req;
  ABLATE_ASSIGN_OR_RETURN(std::string sweep, ParseSweepRef(options.sweep));
  req.set_sweep(sweep);
  req.set_metric(options.metric);
  for (const std::string& axis : options.by) req.add_by(axis);
  v1::ResultsResponse resp;
  ABLATE_RETURN_IF_ERROR(client.Call(&v1::ControlService::StubInterface::Results, req, &resp));
  if (resp.metric().empty()) resp.set_metric(options.metric);
  *io.out << Render(ResultsTable(resp), options.format);
  const bool any_value = std::any_of(resp.rows().begin(), resp.rows().end(),
                                     [](const v1::ResultsRow& r) { return r.n() > 0; });
  if (!resp.rows().empty() && !any_value) {
    // A misspelled --metric gave a table of '-' and nothing else: say so, with what there is.
    const std::string names = ReportedMetrics(client, sweep);
    *io.err << "no trial of sweep " << options.sweep << " has a value of " << resp.metric()
            << (names.empty() ? " yet\n" : " yet; its trials report: " + names + "\n");
  }
  if (options.format == Format::kTable) {
    if (resp.rows().empty()) {
      *io.err << "no results yet for " << resp.metric() << " in sweep " << options.sweep << "\n";
    } else {
      *io.out << "se: standard error of the mean over seeds; 95% CI: t interval of the mean; "
                 "(n/m): n of the m trials have a value\n";
      if (BestRow(resp) >= 0) {
        *io.out << "* best: the " << (resp.lower_is_better() ? "lowest" : "highest")
                << " mean, its 95% interval apart from every other cell's\n";
      } else if (any_value) {
        *io.out << "no best marked: no cell's 95% interval is apart from all others (seed noise "
                   "may explain the order; ablate compare tests paired differences)\n";
      }
      const bool diverged = std::any_of(resp.rows().begin(), resp.rows().end(),
                                        [](const v1::ResultsRow& r) { return r.diverged() > 0; });
      const bool mixed = std::any_of(resp.rows().begin(), resp.rows().end(),
                                     [](const v1::ResultsRow& r) { return r.builds() > 1; });
      if (diverged) {
        *io.out << "! some seeds of this cell diverged: counted in 'diverged', not in its mean\n";
      }
      if (mixed) {
        *io.out << "builds > 1: the cell's values come from different builds of the trainer "
                   "(ablate export shows which)\n";
      }
    }
  }
  return Status::Ok();
}

void AddResultsCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<ResultsOptions>();
  auto format = std::make_shared<std::string>("table");
  CLI::App* sub = app.add_subcommand("results", "The ablation table: metric mean ± standard error and 95% interval over seeds");
  sub->add_option("sweep", opts->sweep, "Sweep name or sweep:ID")->required();
  sub->add_option("--metric", opts->metric, "Metric to compare")->default_str("final_val_loss");
  sub->add_option("--by", opts->by, "Axes to group by (default: every axis except seed)")
      ->delimiter(',');
  AddFormatOption(sub, format.get());
  sub->callback([opts, format, selected] {
    *selected = [opts, format](CommandEnv& env) -> Status {
      opts->format = *ParseFormat(*format);
      ABLATE_RETURN_IF_ERROR(ParseSweepRef(opts->sweep).status());  // before any connection
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return ShowResults(*client, *opts, env.io);
    };
  });
}

}  // namespace ablate::cli
