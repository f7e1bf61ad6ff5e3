#include "fuzz/campaign.hpp"

namespace fc::fuzz {

nlohmann::json run_big_campaign(const Kernel& k, const CampaignOptions& o, std::ostream& log) {
  throw std::invalid_argument("big mode: not yet");
}

}  // namespace fc::fuzz
