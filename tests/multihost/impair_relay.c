/*
 * impair_relay: moves Ethernet frames between two TAP devices and impairs them on the way
 * (loss, delay, reordering, link down). The multi-host test cluster (tests/multihost/) puts one
 * node behind it, since the kernel of the test machines has no netem qdisc.
 *
 * usage: impair_relay -a NETNS:IFNAME -b NETNS:IFNAME [-l LOSS_PCT] [-d DELAY_US]
 *                     [-r REORDER_PCT] [-s SEED] [-p PIDFILE]
 *   NETNS   a network namespace file (/run/netns/NAME) or "-" for the current namespace; the
 *           TAP device IFNAME (persistent: `ip tuntap add dev IFNAME mode tap`) is attached there
 *   -l      drop each frame with this probability in percent (both directions)
 *   -d      delay every frame by this many microseconds
 *   -r      send this percentage of frames at once instead of after the delay, so they overtake
 *           the delayed ones (reordering; needs -d > 0)
 *   SIGUSR1 link down: every frame, queued or new, is dropped; SIGUSR2 link up again.
 *   SIGTERM/SIGINT: exit 0 after printing the frame counters to stderr.
 * Pass criterion of its own: none; the cluster scenarios check MPI results across it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define QCAP 8192     /* frames queued per direction */
#define FRAME_MAX 2048 /* larger frames are dropped (MTU 1500: at most 1514 bytes) */

struct frame {
    uint64_t due_ns;
    uint16_t len;
    unsigned char data[FRAME_MAX];
};

/* FIFO of delayed frames of one direction; every frame has the same delay, so deadlines are
 * non-decreasing and the head is always the next due. */
struct queue {
    struct frame *f;
    unsigned head, n;
};

static volatile sig_atomic_t link_down, stop;
static uint64_t rng_state;
static unsigned long long n_in, n_out, n_lost, n_down, n_reordered, n_overflow;

static void on_signal(int sig) {
    if (sig == SIGUSR1) link_down = 1;
    else if (sig == SIGUSR2) link_down = 0;
    else stop = 1;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: a uniform value in [0, 100). */
static double percent_draw(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / (double)(1ull << 53) * 100.0;
}

/* Attaches to TAP device IFNAME in namespace file NETNS ("-": current). Returns the fd. */
static int open_tap(const char *spec) {
    char ns[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || (size_t)(colon - spec) >= sizeof ns || !colon[1]) {
        fprintf(stderr, "impair_relay: bad device '%s' (NETNS:IFNAME)\n", spec);
        exit(2);
    }
    memcpy(ns, spec, (size_t)(colon - spec));
    ns[colon - spec] = '\0';
    int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (strcmp(ns, "-") != 0) {
        int nfd = open(ns, O_RDONLY | O_CLOEXEC);
        if (nfd < 0 || setns(nfd, CLONE_NEWNET) != 0) {
            perror(ns);
            exit(1);
        }
        close(nfd);
    }
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", colon + 1);
    if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) != 0) {
        fprintf(stderr, "impair_relay: attach %s: %s\n", spec, strerror(errno));
        exit(1);
    }
    if (self < 0 || setns(self, CLONE_NEWNET) != 0) {
        perror("setns back");
        exit(1);
    }
    close(self);
    return fd;
}

static void put(int fd, const unsigned char *p, size_t len) {
    if (write(fd, p, len) == (ssize_t)len) n_out++;
}

/* Sends the frames of q that are due by now_ns to fd. */
static void drain(struct queue *q, int fd, uint64_t t) {
    while (q->n && q->f[q->head].due_ns <= t) {
        struct frame *f = &q->f[q->head];
        put(fd, f->data, f->len);
        q->head = (q->head + 1) % QCAP;
        q->n--;
    }
}

/* Reads every pending frame from in and forwards, queues or drops it. */
static void pump(int in, int out, struct queue *q, uint64_t delay_ns, double loss, double reorder) {
    unsigned char buf[65536];
    for (;;) {
        ssize_t len = read(in, buf, sizeof buf);
        if (len <= 0) return;
        n_in++;
        if (link_down) { n_down++; continue; }
        if (loss > 0 && percent_draw() < loss) { n_lost++; continue; }
        if (delay_ns == 0 || (reorder > 0 && percent_draw() < reorder)) {
            if (delay_ns) n_reordered++;
            put(out, buf, (size_t)len);
            continue;
        }
        if (q->n == QCAP || len > FRAME_MAX) { n_overflow++; continue; }
        struct frame *f = &q->f[(q->head + q->n) % QCAP];
        f->due_ns = now_ns() + delay_ns;
        f->len = (uint16_t)len;
        memcpy(f->data, buf, (size_t)len);
        q->n++;
    }
}

int main(int argc, char **argv) {
    const char *a = NULL, *b = NULL, *pidfile = NULL;
    double loss = 0, reorder = 0;
    long delay_us = 0;
    rng_state = 0x9E3779B97F4A7C15ull;
    int opt;
    while ((opt = getopt(argc, argv, "a:b:l:d:r:s:p:")) != -1) {
        switch (opt) {
        case 'a': a = optarg; break;
        case 'b': b = optarg; break;
        case 'l': loss = atof(optarg); break;
        case 'd': delay_us = atol(optarg); break;
        case 'r': reorder = atof(optarg); break;
        case 's': rng_state ^= strtoull(optarg, NULL, 0) * 0x2545F4914F6CDD1Dull; break;
        case 'p': pidfile = optarg; break;
        default:
            fprintf(stderr, "usage: impair_relay -a NETNS:IF -b NETNS:IF [-l %%] [-d us] [-r %%] "
                            "[-s seed] [-p pidfile]\n");
            return 2;
        }
    }
    if (!a || !b || delay_us < 0 || loss < 0 || reorder < 0) {
        fprintf(stderr, "impair_relay: -a and -b are required\n");
        return 2;
    }
    if (rng_state == 0) rng_state = 1;
    int fa = open_tap(a), fb = open_tap(b);
    struct queue qab = {calloc(QCAP, sizeof(struct frame)), 0, 0};
    struct queue qba = {calloc(QCAP, sizeof(struct frame)), 0, 0};
    if (!qab.f || !qba.f) return 1;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (pidfile) {
        FILE *pf = fopen(pidfile, "w");
        if (!pf) { perror(pidfile); return 1; }
        fprintf(pf, "%d\n", (int)getpid());
        fclose(pf);
    }
    fprintf(stderr, "impair_relay: %s <-> %s loss %.2f%% delay %ld us reorder %.2f%%\n", a, b,
            loss, delay_us, reorder);

    const uint64_t delay_ns = (uint64_t)delay_us * 1000u;
    while (!stop) {
        if (link_down) { n_down += qab.n + qba.n; qab.n = qba.n = 0; }
        uint64_t t = now_ns();
        drain(&qab, fb, t);
        drain(&qba, fa, t);
        /* Sleep until a frame arrives or the next queued one is due (at most 100 ms). */
        uint64_t wait = 100000000ull;
        if (qab.n && qab.f[qab.head].due_ns - t < wait) wait = qab.f[qab.head].due_ns - t;
        if (qba.n && qba.f[qba.head].due_ns - t < wait) wait = qba.f[qba.head].due_ns - t;
        struct timespec ts = {(time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull)};
        struct pollfd p[2] = {{fa, POLLIN, 0}, {fb, POLLIN, 0}};
        if (ppoll(p, 2, &ts, NULL) < 0 && errno != EINTR) { perror("ppoll"); return 1; }
        if (p[0].revents & POLLIN) pump(fa, fb, &qab, delay_ns, loss, reorder);
        if (p[1].revents & POLLIN) pump(fb, fa, &qba, delay_ns, loss, reorder);
    }
    fprintf(stderr,
            "impair_relay: frames in %llu out %llu lost %llu dropped-link-down %llu "
            "reordered %llu overflow %llu\n",
            n_in, n_out, n_lost, n_down, n_reordered, n_overflow);
    return 0;
}
