#include "commands/query.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <sstream>

namespace ablate::cli {

Table QueryTable(const v1::QueryResponse& resp) {
  Table t;
  for (const std::string& c : resp.columns()) t.AddColumn(c);
  for (const v1::QueryRow& r : resp.rows()) {
    std::vector<Cell> row;
    for (const v1::QueryValue& v : r.values()) {
      switch (v.v_case()) {
        case v1::QueryValue::kInteger:
          row.push_back(Cell::Int(v.integer()));
          break;
        case v1::QueryValue::kReal:
          row.push_back(Cell::Real(v.real(), Cell::kGeneral));
          break;
        case v1::QueryValue::kText:
          row.push_back(Cell::Text(v.text()));
          break;
        default:
          row.push_back(Cell());
          break;  // SQL NULL
      }
    }
    t.AddRow(std::move(row));
  }
  return t;
}

Status RunQuery(Client& client, const QueryOptions& options, const Io& io) {
  v1::QueryRequest req;
  if (options.sql == "-") {
    std::ostringstream sql;
    sql << std::cin.rdbuf();
    req.set_sql(sql.str());
  } else {
    req.set_sql(options.sql);
  }
  if (req.sql().find_first_not_of(" \t\r\n;") == std::string::npos) {
    return InvalidArgument("query: empty SQL statement");
  }
  if (options.max_rows < 0) return InvalidArgument("--max-rows: must be 0 or positive");
  req.set_max_rows(options.max_rows);
  v1::QueryResponse resp;
  ABLATE_RETURN_IF_ERROR(client.Call(&v1::ControlService::StubInterface::Query, req, &resp));
  *io.out << Render(QueryTable(resp), options.format);
  if (resp.truncated()) {
    *io.err << "note: result truncated to " << resp.rows_size()
            << " rows by the coordinator's row limit; narrow the query, or raise --max-rows\n";
  }
  return Status::Ok();
}

void AddQueryCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<QueryOptions>();
  auto format = std::make_shared<std::string>("table");
  CLI::App* sub =
      app.add_subcommand("query", "Read-only SQL on the results database (tables: see README)");
  sub->add_option("sql", opts->sql, "One SELECT statement; - reads it from standard input")
      ->required();
  sub->add_option("--max-rows", opts->max_rows, "Row limit (0: the coordinator's default)");
  AddFormatOption(sub, format.get());
  sub->callback([opts, format, selected] {
    *selected = [opts, format](CommandEnv& env) -> Status {
      opts->format = *ParseFormat(*format);
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return RunQuery(*client, *opts, env.io);
    };
  });
}

}  // namespace ablate::cli
