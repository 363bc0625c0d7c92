// ObjectCache (coll/schedule/object_cache.h): the per-thread cache of freed objects that the
// queued calls and latency-path jobs are allocated from.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "object_cache.h"

namespace {

struct Obj {
    TWOHOP_CACHED_OBJECT(Obj)
    char payload[48];
};

struct Other {
    TWOHOP_CACHED_OBJECT(Other)
    char payload[48]; // the same size: a cache per class, not per size
};

constexpr int kSlots = TWOHOP_OBJECT_CACHE_SLOTS;

} // namespace

TEST(ObjectCache, FreedObjectIsReusedByTheSameThread) {
    if (kSlots == 0) GTEST_SKIP() << "cache off (AddressSanitizer build)";
    Obj *a = new Obj;
    delete a;
    Obj *b = new Obj;
    EXPECT_EQ(a, b);
    delete b;
}

TEST(ObjectCache, KeepsAtMostItsSlotsLastInFirstOut) {
    if (kSlots == 0) GTEST_SKIP() << "cache off (AddressSanitizer build)";
    std::vector<Obj *> made;
    for (int i = 0; i < kSlots + 3; ++i) made.push_back(new Obj);
    for (Obj *o : made) delete o; // the first kSlots are kept, the rest go to the allocator
    for (int i = kSlots - 1; i >= 0; --i) {
        Obj *o = new Obj;
        EXPECT_EQ(o, made[i]) << "slot " << i;
        made[i] = o;
    }
    for (int i = 0; i < kSlots; ++i) delete made[i];
}

TEST(ObjectCache, ClassesDoNotShareACache) {
    if (kSlots == 0) GTEST_SKIP() << "cache off (AddressSanitizer build)";
    Obj *a = new Obj;
    void *addr = a;
    delete a;
    Other *o = new Other;
    EXPECT_NE(static_cast<void *>(o), addr);
    delete o;
    Obj *b = new Obj;
    EXPECT_EQ(static_cast<void *>(b), addr);
    delete b;
}

TEST(ObjectCache, AnotherThreadDoesNotTakeThisThreadsObjects) {
    if (kSlots == 0) GTEST_SKIP() << "cache off (AddressSanitizer build)";
    Obj *a = new Obj;
    delete a; // kept by this thread
    Obj *seen = nullptr;
    std::thread([&] {
        seen = new Obj;
        delete seen; // kept by that thread, freed when it ends
    }).join();
    EXPECT_NE(seen, a);
    Obj *b = new Obj;
    EXPECT_EQ(b, a);
    delete b;
}

TEST(ObjectCache, ObjectsFreedOnAnotherThreadAndThreadsThatEndHoldingSome) {
    // Made here, freed there (the proxy thread may finish a call an MPI thread started); the
    // threads end with full caches, which their cleanup frees; then new threads cache again.
    for (int round = 0; round < 3; ++round) {
        std::vector<Obj *> made;
        for (int i = 0; i < 2 * kSlots + 4; ++i) made.push_back(new Obj);
        std::set<Obj *> freed(made.begin(), made.end());
        std::thread([&] {
            for (Obj *o : made) delete o;
            std::vector<Obj *> again;
            for (int i = 0; i < kSlots; ++i) again.push_back(new Obj);
            if (kSlots > 0) { // the first kSlots it freed, taken back by the same thread
                for (Obj *o : again) EXPECT_EQ(freed.count(o), 1u);
            }
            for (Obj *o : again) delete o;
        }).join();
    }
}
