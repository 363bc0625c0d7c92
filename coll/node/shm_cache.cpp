#include "shm_cache.h"

#include <algorithm>

namespace twohop {
namespace {

/* FNV-1a, 64 bit (Fowler, Noll, Vo; the published offset basis and prime). */
uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < n; ++i) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
constexpr uint64_t kBasis = 0xcbf29ce484222325ULL;

} // namespace

uint64_t shm_token(const std::string &name) {
    const uint64_t h = fnv(kBasis, name.data(), name.size());
    return h ? h : 1;
}

uint64_t shm_shape(const ShmLayout &layout, const std::vector<uint64_t> &member_proc_keys) {
    const uint64_t v[3] = {uint64_t(layout.local_size), uint64_t(layout.depth), layout.slot_bytes};
    uint64_t h = fnv(kBasis, v, sizeof(v));
    h = fnv(h, member_proc_keys.data(), member_proc_keys.size() * sizeof(uint64_t));
    return h ? h : 1;
}

uint64_t choose_reuse(const std::vector<const ShmOffer *> &offers, uint64_t shape) {
    if (offers.empty()) return 0;
    for (int i = 0; i < kShmOffers; ++i) {
        const ShmOffer &cand = offers[0][i];
        if (cand.token == 0 || cand.shape != shape) continue;
        bool everyone = true;
        for (size_t l = 1; everyone && l < offers.size(); ++l) {
            bool has = false;
            for (int j = 0; j < kShmOffers && !has; ++j) {
                has = offers[l][j].token == cand.token && offers[l][j].shape == shape;
            }
            everyone = has;
        }
        if (everyone) return cand.token;
    }
    return 0;
}

ShmCache &ShmCache::process() {
    static ShmCache c;
    return c;
}

std::vector<RetainedShm> ShmCache::take() {
    std::lock_guard<std::mutex> lock(m_);
    std::vector<RetainedShm> out;
    for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) out.push_back(std::move(*it));
    kept_.clear();
    return out;
}

void ShmCache::put(RetainedShm r) {
    std::vector<RetainedShm> evicted; // unmapped outside the lock
    {
        std::lock_guard<std::mutex> lock(m_);
        kept_.push_back(std::move(r));
        while (kept_.size() > size_t(kShmOffers)) {
            evicted.push_back(std::move(kept_.front()));
            kept_.erase(kept_.begin());
        }
    }
}

void ShmCache::clear() {
    std::vector<RetainedShm> gone;
    std::lock_guard<std::mutex> lock(m_);
    gone.swap(kept_);
}

size_t ShmCache::size() {
    std::lock_guard<std::mutex> lock(m_);
    return kept_.size();
}

} // namespace twohop
