#include "comm_ids.h"

namespace twohop {

uint32_t CommIdRegistry::smallest_free(uint64_t from) const {
    uint64_t id = from;
    for (auto it = used_.lower_bound(static_cast<uint32_t>(from));
         id < kMaxCommIds && it != used_.end() && *it == id; ++it) {
        ++id;
    }
    return id < kMaxCommIds ? static_cast<uint32_t>(id) : kMaxCommIds;
}

uint32_t CommIdRegistry::reserve_from(uint64_t floor) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (floor >= kMaxCommIds) return kMaxCommIds;
    uint32_t id = smallest_free(floor > next_ ? floor : next_);
    if (id >= kMaxCommIds) id = smallest_free(floor); // wrap around
    if (id >= kMaxCommIds) return kMaxCommIds;
    used_.insert(id);
    next_ = uint64_t(id) + 1;
    return id;
}

bool CommIdRegistry::reserve_exact(uint32_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!used_.insert(id).second) return false;
    if (uint64_t(id) + 1 > next_) next_ = uint64_t(id) + 1;
    return true;
}

void CommIdRegistry::release(uint32_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    used_.erase(id);
}

std::size_t CommIdRegistry::size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return used_.size();
}

CommIdRegistry &process_comm_ids() {
    static CommIdRegistry reg;
    return reg;
}

int agree_comm_id(Exchange &ex, CommIdRegistry &reg, uint32_t *id, std::string *err) {
    uint64_t floor = 0;
    for (;;) {
        const uint32_t mine = reg.reserve_from(floor);
        uint64_t cand = 0;
        int rc = ex.agree_max(mine, &cand, err);
        if (rc != TWOHOP_OK) {
            if (mine < kMaxCommIds) reg.release(mine);
            return rc;
        }
        if (cand >= kMaxCommIds) { // some rank has no id left: everyone falls back
            if (mine < kMaxCommIds) reg.release(mine);
            return TWOHOP_ERR_NO_MEMORY;
        }
        const uint32_t c = static_cast<uint32_t>(cand);
        bool ok = true;
        if (c != mine) {
            if (mine < kMaxCommIds) reg.release(mine);
            ok = reg.reserve_exact(c);
        }
        int taken = 0;
        rc = ex.agree_or(!ok, &taken, err);
        if (rc != TWOHOP_OK || taken) {
            if (ok) reg.release(c);
            if (rc != TWOHOP_OK) return rc;
            floor = cand + 1;
            continue;
        }
        *id = c;
        return TWOHOP_OK;
    }
}

} // namespace twohop
