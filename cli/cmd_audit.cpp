#include "cli/command.hpp"
namespace fc::cli {
Run setup_audit(CLI::App& app) {
  app.add_subcommand("audit", "TODO");
  return [] { return kExitUsage; };
}
}  // namespace fc::cli
