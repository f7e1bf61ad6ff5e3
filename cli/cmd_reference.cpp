#include "cli/command.hpp"
namespace fc::cli {
Run setup_reference(CLI::App& app) {
  app.add_subcommand("reference", "TODO");
  return [] { return kExitUsage; };
}
}  // namespace fc::cli
