/* Counter deltas, classification and diagnosis; see counter_delta.h. */
#include "counter_delta.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace twohop::rc {

namespace {

struct Advice {
    const char *what;        // noun phrase, "symbol errors"
    const char *consequence; // "CRC drops → Go-Back-N retransmissions"
    const char *action;      // "check the cable or transceiver"
};

const std::map<std::string, Advice> kAdvice = {
    {"symbol_error",
     {"symbol errors", "CRC drops → Go-Back-N retransmissions", "check the cable or transceiver"}},
    {"link_error_recovery",
     {"link retrains", "packets in flight lost → Go-Back-N retransmissions",
      "check the cable or transceiver, then the switch port"}},
    {"link_downed",
     {"link-down events", "QPs on the link stalled until timeout × (retry+1) ran out",
      "check the cable, the switch port and the subnet manager log"}},
    {"local_link_integrity_errors",
     {"local link integrity errors", "the link is at its error threshold → packet loss",
      "replace the cable or transceiver"}},
    {"port_rcv_errors",
     {"receive errors", "corrupt packets dropped → Go-Back-N retransmissions",
      "check this port's cable and the peer's transmitter"}},
    {"port_rcv_remote_physical_errors",
     {"packets marked bad upstream", "a fault on another link of the path",
      "check the switch counters (ibqueryerrors)"}},
    {"excessive_buffer_overrun_errors",
     {"receive buffer overruns", "the link partner overran flow-control credits",
      "check the peer port and VL configuration"}},
    {"port_xmit_wait",
     {"transmit wait ticks", "fabric congestion (not a link fault)",
      "look for incast; consider adaptive routing or a separate service level"}},
    {"port_xmit_discards",
     {"transmit discards", "packets dropped at this port → retransmissions",
      "check congestion and the link state"}},
    {"out_of_buffer",
     {"receive-buffer exhaustions", "RNR NAKs or drops", "raise coll_twohop_rc_rx_queue_len"}},
    {"np_cnp_sent",
     {"congestion notifications sent", "ECN congestion control active",
      "check the switch ECN thresholds"}},
    {"rp_cnp_handled",
     {"congestion notifications handled", "this sender was slowed down",
      "check the switch ECN thresholds"}},
    {"local_ack_timeout_err",
     {"ACK timeouts", "each resent the unacknowledged window (Go-Back-N)",
      "if the link counters are clean, suspect congestion or the remote "
      "side; see coll_twohop_rc_timeout"}},
    {"packet_seq_err",
     {"sequence-error NAKs", "packets lost on the path → Go-Back-N retransmissions",
      "check the link counters along the path"}},
    {"implied_nak_seq_err",
     {"implied NAKs", "requests or replies lost → Go-Back-N retransmissions",
      "check the link counters along the path"}},
    {"duplicate_request",
     {"duplicate requests received", "a peer retransmitted (Go-Back-N)",
      "check the peer's link counters"}},
    {"out_of_sequence",
     {"out-of-sequence packets", "packets lost on the path → Go-Back-N",
      "check the link counters along the path"}},
    {"rnr_nak_retry_err",
     {"RNR retry exhaustions", "the receiver had no buffers; QP failed",
      "raise coll_twohop_rc_rx_queue_len or coll_twohop_rc_rnr_retry"}},
    {"req_transport_retries_exceeded",
     {"transport retry exhaustions", "connections failed after timeout × (retry+1)",
      "fix the link first; then revisit coll_twohop_rc_timeout"}},
    {"roce_adp_retrans",
     {"adaptive retransmissions", "packets lost on the path",
      "check the link counters along the path"}},
};

std::string state_word(const std::string &s) {
    size_t colon = s.find(": ");
    return colon == std::string::npos ? s : s.substr(colon + 2);
}

CounterDelta make_delta(const CounterValue *b, const CounterValue *a) {
    const CounterValue *any = a != nullptr ? a : b;
    CounterDelta d;
    d.name = any->name;
    d.hw = any->hw;
    d.info = find_counter(d.name);
    d.cls = d.info != nullptr ? d.info->cls : CounterClass::Other;
    if (b == nullptr) {
        d.kind = DeltaKind::New;
        return d;
    }
    if (a == nullptr) {
        d.kind = DeltaKind::Gone;
        return d;
    }
    if (!b->ok || !a->ok) {
        d.kind = DeltaKind::Unreadable;
        d.note = !b->ok ? "first snapshot: " + b->error : "second snapshot: " + a->error;
        return d;
    }
    d.before = b->value;
    d.after = a->value;
    const CounterWidth w = counter_width(d.info, d.hw);
    const std::uint64_t max = counter_max(w.bits);
    const bool saturates = w.overflow == Overflow::Saturate && max != ~0ull;
    if ((saturates && d.before >= max) || (w.legacy32 && d.before == kLegacy32Max)) {
        d.kind = DeltaKind::SaturatedBefore;
    } else if (d.after < d.before) {
        d.kind = w.overflow == Overflow::Wrap ? DeltaKind::Wrapped : DeltaKind::Reset;
        d.delta = d.kind == DeltaKind::Wrapped ? d.after + (max - d.before) + 1 : d.after;
    } else if (saturates && d.after >= max) {
        d.kind = DeltaKind::AtLeast;
        d.delta = max - d.before;
    } else if (w.legacy32 && d.after == kLegacy32Max) {
        d.kind = DeltaKind::AtLeast;
        d.delta = kLegacy32Max - d.before;
    } else {
        d.kind = DeltaKind::Exact;
        d.delta = d.after - d.before;
    }
    return d;
}

std::string quantity(const CounterDelta &d) {
    char buf[160];
    std::uint64_t scale = d.info != nullptr ? d.info->scale : 1;
    switch (d.kind) {
    case DeltaKind::Exact:
        std::snprintf(buf, sizeof(buf), "by %llu", (unsigned long long)(d.delta * scale));
        break;
    case DeltaKind::AtLeast:
        std::snprintf(buf, sizeof(buf), "by at least %llu (the %d-bit counter saturated at %llu)",
                      (unsigned long long)d.delta, d.after == kLegacy32Max ? 32 : d.info->width_bits,
                      (unsigned long long)d.after);
        break;
    default:
        return "";
    }
    return buf;
}

int class_rank(CounterClass c) {
    switch (c) {
    case CounterClass::LinkIntegrity:
        return 0;
    case CounterClass::Transport:
        return 1;
    case CounterClass::Congestion:
        return 2;
    default:
        return 3;
    }
}

} // namespace

Outcome CounterDelta::outcome() const {
    if (kind == DeltaKind::Exact) {
        return delta > 0 ? Outcome::Rose : Outcome::Unchanged;
    }
    return kind == DeltaKind::AtLeast ? Outcome::Rose : Outcome::Inconclusive;
}

std::string CounterDelta::amount() const {
    std::uint64_t scale = info != nullptr ? info->scale : 1;
    switch (kind) {
    case DeltaKind::Exact:
        return "+" + std::to_string(delta * scale);
    case DeltaKind::AtLeast:
        return ">=+" + std::to_string(delta) + " (saturated)";
    case DeltaKind::Reset:
        return "unknown (reset from " + std::to_string(before) + " to " + std::to_string(after) +
               ")";
    case DeltaKind::Wrapped:
        return "unknown (went from " + std::to_string(before) + " to " + std::to_string(after) +
               ": +" + std::to_string(delta * scale) + " if the 32-bit counter wrapped once, or " +
               "a reset)";
    case DeltaKind::SaturatedBefore:
        return "unknown (already saturated at " + std::to_string(before) + " before; clear with " +
               "perfquery -R)";
    case DeltaKind::Unreadable:
        return "unreadable (" + note + ")";
    case DeltaKind::New:
        return "new";
    case DeltaKind::Gone:
        return "gone";
    }
    return "";
}

const CounterDelta *PortDelta::find(const std::string &name) const {
    for (const CounterDelta &d : deltas) {
        if (d.name == name) {
            return &d;
        }
    }
    return nullptr;
}

SnapshotDelta diff(const Snapshot &before, const Snapshot &after) {
    SnapshotDelta out;
    out.seconds = after.time_s - before.time_s;
    for (const PortSnapshot &b : before.ports) {
        PortDelta pd;
        pd.device = b.device;
        pd.port = b.port;
        const PortSnapshot *a = after.find(b.device, b.port);
        const PortSnapshot &cur = a != nullptr ? *a : b;
        pd.state = cur.state;
        pd.rate = cur.rate;
        pd.link_layer = cur.link_layer;
        pd.has_hw_counters = b.has_hw_counters && (a == nullptr || a->has_hw_counters);
        if (a == nullptr) {
            pd.presence = Presence::Vanished;
            out.ports.push_back(std::move(pd));
            continue;
        }
        for (const CounterValue &cb : b.counters) {
            pd.deltas.push_back(make_delta(&cb, a->find(cb.name)));
        }
        for (const CounterValue &ca : a->counters) {
            if (b.find(ca.name) == nullptr) {
                pd.deltas.push_back(make_delta(nullptr, &ca));
            }
        }
        out.ports.push_back(std::move(pd));
    }
    for (const PortSnapshot &a : after.ports) {
        if (before.find(a.device, a.port) == nullptr) {
            PortDelta pd;
            pd.device = a.device;
            pd.port = a.port;
            pd.presence = Presence::Appeared;
            pd.state = a.state;
            pd.rate = a.rate;
            pd.link_layer = a.link_layer;
            out.ports.push_back(std::move(pd));
        }
    }
    return out;
}

std::vector<std::string> diagnose(const PortDelta &p, const std::string &during) {
    std::vector<std::string> lines;
    if (p.presence == Presence::Vanished) {
        lines.push_back(p.label() + ": disappeared " + during +
                        " (device removed, driver reloaded or reset): inconclusive, not counted in the verdict");
        return lines;
    }
    if (p.presence == Presence::Appeared) {
        lines.push_back(p.label() + ": appeared " + during +
                        ": inconclusive, not counted in the verdict");
        return lines;
    }
    std::vector<const CounterDelta *> rising;
    for (const CounterDelta &d : p.deltas) {
        if (is_error_class(d.cls) && d.rose()) {
            rising.push_back(&d);
        }
    }
    std::size_t n = 0;
    const CounterInfo *catalog = counter_catalog(&n);
    auto order = [catalog, n](const CounterDelta *d) {
        std::size_t pos = d->info != nullptr ? static_cast<std::size_t>(d->info - catalog) : n;
        return std::make_pair(class_rank(d->cls), pos);
    };
    std::stable_sort(
        rising.begin(), rising.end(),
        [&order](const CounterDelta *x, const CounterDelta *y) { return order(x) < order(y); });
    for (const CounterDelta &d : p.deltas) {
        if (is_error_class(d.cls) && d.outcome() == Outcome::Inconclusive) {
            auto it = kAdvice.find(d.name);
            lines.push_back(p.label() + ": " + (it != kAdvice.end() ? it->second.what : d.name) +
                            " inconclusive " + during + ": " + d.amount() +
                            "; not counted in the verdict");
        }
    }
    for (const CounterDelta *d : rising) {
        auto it = kAdvice.find(d->name);
        std::string line = p.label() + ": ";
        if (it != kAdvice.end()) {
            line += std::string(it->second.what) + " rose " + quantity(*d) + " " + during + " → " +
                    it->second.consequence + "; " + it->second.action;
        } else {
            line += d->name + " rose " + quantity(*d) + " " + during + " → " + d->info->meaning;
        }
        lines.push_back(line);
    }
    return lines;
}

Verdict verdict(const SnapshotDelta &d) {
    Verdict v = Verdict::Clean;
    bool inconclusive = false;
    for (const PortDelta &p : d.ports) {
        inconclusive = inconclusive || p.presence != Presence::Both;
        for (const CounterDelta &c : p.deltas) {
            if (!c.rose()) {
                inconclusive = inconclusive || (is_error_class(c.cls) &&
                                                c.outcome() == Outcome::Inconclusive);
                continue;
            }
            if (c.cls == CounterClass::LinkIntegrity) {
                v = Verdict::LinkFault;
            } else if (c.cls == CounterClass::Transport && v != Verdict::LinkFault) {
                v = Verdict::Retransmission;
            } else if (c.cls == CounterClass::Congestion && v == Verdict::Clean) {
                v = Verdict::Congestion;
            }
        }
    }
    return v == Verdict::Clean && inconclusive ? Verdict::Inconclusive : v;
}

const char *verdict_name(Verdict v) {
    switch (v) {
    case Verdict::Clean:
        return "clean";
    case Verdict::Inconclusive:
        return "inconclusive";
    case Verdict::Congestion:
        return "congestion";
    case Verdict::Retransmission:
        return "retransmissions";
    case Verdict::LinkFault:
        return "link fault";
    }
    return "?";
}

std::string format_bytes(double bytes) {
    static const char *const units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (bytes >= 1000.0 && u < 5) {
        bytes /= 1000.0;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
    return buf;
}

void print_delta(std::ostream &os, const SnapshotDelta &d, const std::string &during) {
    static const CounterClass kShown[] = {CounterClass::LinkIntegrity, CounterClass::Congestion,
                                          CounterClass::Transport};
    for (const PortDelta &p : d.ports) {
        os << p.label();
        if (p.presence != Presence::Both) {
            os << ": " << (p.presence == Presence::Vanished ? "VANISHED" : "NEW") << "\n";
        } else {
            os << " (" << (p.state.empty() ? "state unknown" : state_word(p.state));
            if (!p.rate.empty())
                os << ", " << p.rate;
            if (!p.link_layer.empty())
                os << ", " << p.link_layer;
            os << ")";
            const CounterDelta *tx = p.find("port_xmit_data");
            const CounterDelta *rx = p.find("port_rcv_data");
            const char *sep = ": ";
            if (tx != nullptr && tx->kind == DeltaKind::Exact) {
                os << sep << "sent " << format_bytes(4.0 * tx->delta);
                sep = ", ";
            }
            if (rx != nullptr && rx->kind == DeltaKind::Exact) {
                os << sep << "received " << format_bytes(4.0 * rx->delta);
            }
            os << "\n";
            for (CounterClass c : kShown) {
                std::string items;
                for (const CounterDelta &cd : p.deltas) {
                    if (cd.cls == c && cd.rose()) {
                        items += (items.empty() ? "" : ", ") + cd.name + " " + cd.amount();
                    }
                }
                char head[40];
                std::snprintf(head, sizeof(head), "  %-24s: ", class_name(c));
                os << head << (items.empty() ? "clean" : items) << "\n";
            }
            if (!p.has_hw_counters) {
                os << "  (no hw_counters: transport retransmission counters unavailable)\n";
            }
            for (const CounterDelta &cd : p.deltas) {
                if (!is_error_class(cd.cls) && cd.outcome() == Outcome::Inconclusive) {
                    os << "  " << cd.name << ": " << cd.amount() << "\n";
                }
            }
        }
        for (const std::string &line : diagnose(p, during)) {
            os << "  → " << line << "\n";
        }
    }
}

} // namespace twohop::rc
