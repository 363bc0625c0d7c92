#include "node_shm.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace twohop {

NodeShm::~NodeShm() {
    if (base_) munmap(base_, layout_.total_bytes());
    unlink();
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
