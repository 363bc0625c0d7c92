/* Test helper: builds a throw-away /sys-like tree (class/infiniband/...) under /tmp. */
#ifndef TWOHOP_RC_TEST_SYSFS_TREE_H
#define TWOHOP_RC_TEST_SYSFS_TREE_H

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

class SysfsTree {
  public:
    SysfsTree() {
        char tmpl[] = "/tmp/twohop_rc_sysfs.XXXXXX";
        root_ = mkdtemp(tmpl);
    }
    ~SysfsTree() { std::filesystem::remove_all(root_); }
    SysfsTree(const SysfsTree &) = delete;
    SysfsTree &operator=(const SysfsTree &) = delete;

    const std::string &root() const { return root_; }

    std::string port_dir(const std::string &dev, int port) const {
        return root_ + "/class/infiniband/" + dev + "/ports/" + std::to_string(port);
    }

    /* Adds a port with state/rate/link_layer and empty counters/ (and hw_counters/ if hw). */
    void add_port(const std::string &dev, int port, bool hw = true) {
        std::string d = port_dir(dev, port);
        std::filesystem::create_directories(d + "/counters");
        if (hw)
            std::filesystem::create_directories(d + "/hw_counters");
        write(d + "/state", "4: ACTIVE\n");
        write(d + "/rate", "200 Gb/sec (4X HDR)\n");
        write(d + "/link_layer", "InfiniBand\n");
    }

    /* Writes text (e.g. "57\n" or "garbage") into counters/<name> or hw_counters/<name>. */
    void set(const std::string &dev, int port, const std::string &name, const std::string &text,
             bool hw = false) {
        write(port_dir(dev, port) + (hw ? "/hw_counters/" : "/counters/") + name, text);
    }
    void set(const std::string &dev, int port, const std::string &name, unsigned long long v,
             bool hw = false) {
        set(dev, port, name, std::to_string(v) + "\n", hw);
    }

    void remove_device(const std::string &dev) {
        std::filesystem::remove_all(root_ + "/class/infiniband/" + dev);
    }

    static void write(const std::string &path, const std::string &text) {
        std::ofstream(path) << text;
    }

  private:
    std::string root_;
};

#endif
