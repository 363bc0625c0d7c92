#include "node_shm.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace twohop {

std::string shm_name(uint64_t pidns, int64_t pid, uint64_t nonce) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "/twohop-%u-%llu-%lld-%016llx", static_cast<unsigned>(getuid()),
                  static_cast<unsigned long long>(pidns), static_cast<long long>(pid),
                  static_cast<unsigned long long>(nonce));
    return buf;
}

uint64_t pid_namespace() {
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) != 0) return 0;
    return static_cast<uint64_t>(st.st_ino);
}

uint64_t random_nonce() {
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) {
        // No entropy source: time and pid still make a collision very unlikely.
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint64_t(ts.tv_sec) << 32) ^ uint64_t(ts.tv_nsec) ^ (uint64_t(getpid()) << 16);
    }
    return v;
}

int remove_stale_segments(const std::string &dir, uint64_t pidns, uint64_t *bytes) {
    DIR *d = opendir(dir.c_str());
    if (!d) return 0;
    char prefix[64];
    std::snprintf(prefix, sizeof(prefix), "twohop-%u-%llu-", static_cast<unsigned>(getuid()),
                  static_cast<unsigned long long>(pidns));
    const size_t plen = std::strlen(prefix);
    int removed = 0;
    while (struct dirent *e = readdir(d)) {
        if (std::strncmp(e->d_name, prefix, plen) != 0) continue;
        char *end = nullptr;
        const long long pid = std::strtoll(e->d_name + plen, &end, 10);
        if (pid <= 0 || !end || *end != '-') continue;
        if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue; // alive/unknown
        const std::string path = dir + "/" + e->d_name;
        struct stat st;
        const uint64_t size = stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
        if (::unlink(path.c_str()) == 0) {
            ++removed;
            *bytes += size;
        }
    }
    closedir(d);
    return removed;
}

NodeShm::~NodeShm() {
    if (base_) munmap(base_, layout_.total_bytes());
    unlink();
}

NodeShm &NodeShm::operator=(NodeShm &&o) noexcept {
    if (this != &o) {
        if (base_) munmap(base_, layout_.total_bytes());
        unlink();
        base_ = o.base_;
        layout_ = o.layout_;
        name_ = std::move(o.name_);
        owner_ = o.owner_;
        o.base_ = nullptr;
        o.owner_ = false;
        o.name_.clear();
    }
    return *this;
}

bool NodeShm::map(int fd, std::string *err) {
    void *p = mmap(nullptr, layout_.total_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        *err = "shm " + name_ + ": mmap of " + std::to_string(layout_.total_bytes()) +
               " bytes failed: " + std::strerror(e);
        return false;
    }
    base_ = static_cast<char *>(p);
    // Huge pages cut TLB misses on the slots where the kernel allows them for shared memory
    // (/sys/kernel/mm/transparent_hugepage/shmem_enabled = advise); a refusal is harmless.
    (void)madvise(p, layout_.total_bytes(), MADV_HUGEPAGE);
    return true;
}

bool NodeShm::create(const std::string &name, const ShmLayout &layout, std::string *err) {
    name_ = name;
    layout_ = layout;
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        *err = "shm " + name + ": shm_open(O_CREAT|O_EXCL) failed: " + std::strerror(errno);
        return false;
    }
    owner_ = true;
    const off_t bytes = static_cast<off_t>(layout.total_bytes());
    int rc = ftruncate(fd, bytes);
    if (rc == 0) rc = posix_fallocate(fd, 0, bytes);
    else rc = errno;
    if (rc != 0) {
        *err = "shm " + name + ": reserving " + std::to_string(bytes) +
               " bytes failed (is /dev/shm large enough?): " + std::strerror(rc);
        close(fd);
        return false;
    }
    if (!map(fd, err)) return false;
    for (int l = 0; l < layout.local_size; ++l) {
        new (&flags(l)) RankFlags{}; // value-initialised: every counter 0
    }
    std::atomic_thread_fence(std::memory_order_release);
    return true;
}

bool NodeShm::attach(const std::string &name, const ShmLayout &layout, std::string *err) {
    name_ = name;
    layout_ = layout;
    int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
        *err = "shm " + name + ": shm_open failed: " + std::strerror(errno);
        return false;
    }
    return map(fd, err);
}

void NodeShm::unlink() {
    if (owner_) {
        shm_unlink(name_.c_str());
        owner_ = false;
    }
}

} // namespace twohop
