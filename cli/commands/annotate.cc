#include "commands/annotate.h"

#include <CLI/CLI.hpp>
#include <memory>

namespace ablate::cli {

Status AnnotateTrial(Client& client, const AnnotateOptions& options, const Io& io) {
  ABLATE_ASSIGN_OR_RETURN(int64_t id, ParseTrialRef(options.trial));
  v1::AnnotateRequest req;
  req.set_trial_id(id);
  for (const auto& t : options.tags) req.add_add_tags(t);
  for (const auto& t : options.untags) req.add_remove_tags(t);
  if (options.note) {
    req.set_set_note(true);
    req.set_note(*options.note);
  }
  v1::AnnotateResponse resp;
  ABLATE_RETURN_IF_ERROR(client.Call(&v1::ControlService::StubInterface::Annotate, req, &resp));
  std::string tags;
  for (const auto& t : resp.tags()) tags += (tags.empty() ? "" : ", ") + t;
  *io.out << "trial " << id << ": tags " << (tags.empty() ? "-" : tags) << "; note "
          << (resp.note().empty() ? "-" : "\"" + resp.note() + "\"") << "\n";
  return Status::Ok();
}

void AddAnnotateCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<AnnotateOptions>();
  CLI::App* sub = app.add_subcommand("annotate", "Tag a trial or give it a note");
  sub->add_option("trial", opts->trial, "Trial id or trial:ID")->required();
  sub->add_option("--tag", opts->tags, "Add a tag (repeatable)");
  sub->add_option("--untag", opts->untags, "Remove a tag (repeatable)");
  sub->add_option("--note", opts->note, "Replace the note (\"\" clears it)");
  sub->callback([opts, selected] {
    *selected = [opts](CommandEnv& env) -> Status {
      ABLATE_RETURN_IF_ERROR(ParseTrialRef(opts->trial).status());
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return AnnotateTrial(*client, *opts, env.io);
    };
  });
}

}  // namespace ablate::cli
