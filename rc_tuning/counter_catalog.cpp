/* Port counter catalogue; sources in counter_catalog.h. */
#include "counter_catalog.h"

#include <cstring>

namespace twohop::rc {

namespace {

using CC = CounterClass;
constexpr Overflow kSat = Overflow::Saturate;
constexpr Overflow kWrap = Overflow::Wrap;

const CounterInfo kCatalog[] = {
    // ---- link integrity: physical-layer faults; each lost packet costs a Go-Back-N window ----
    {"symbol_error", CC::LinkIntegrity, 16, kSat, false, 1, "events",
     "minor link errors (bad 8b/10b or 64b/66b symbols); rising = marginal cable or transceiver"},
    {"link_error_recovery", CC::LinkIntegrity, 8, kSat, false, 1, "events",
     "link retrained after errors; packets in flight are lost"},
    {"link_downed", CC::LinkIntegrity, 8, kSat, false, 1, "events",
     "link went down; QPs on it time out and may exhaust their retries"},
    {"local_link_integrity_errors", CC::LinkIntegrity, 4, kSat, false, 1, "events",
     "physical errors exceeded the local link integrity threshold"},
    {"port_rcv_errors", CC::LinkIntegrity, 16, kSat, false, 1, "packets",
     "received packets dropped for CRC, length or other errors"},
    {"excessive_buffer_overrun_errors", CC::LinkIntegrity, 4, kSat, false, 1, "events",
     "consecutive receive buffer overruns: the link partner ignored flow-control credits"},
    {"port_rcv_remote_physical_errors", CC::LinkIntegrity, 16, kSat, false, 1, "packets",
     "received packets marked bad (EBP) by an upstream hop: a fault elsewhere on the path"},
    // ---- congestion ----
    {"port_xmit_wait", CC::Congestion, 32, kSat, false, 1, "ticks",
     "time the port had data but no flow-control credits (head-of-line blocking)"},
    {"port_xmit_discards", CC::Congestion, 16, kSat, false, 1, "packets",
     "outbound packets discarded (port down or congestion timeout)"},
    {"out_of_buffer", CC::Congestion, 32, kWrap, false, 1, "events",
     "receive queue had no buffer: packet dropped or RNR NAKed"},
    {"np_cnp_sent", CC::Congestion, 32, kWrap, false, 1, "packets", "RoCE congestion notifications sent"},
    {"rp_cnp_handled", CC::Congestion, 32, kWrap, false, 1, "packets",
     "RoCE congestion notifications handled (sender slowed down)"},
    // ---- transport retransmission (RC requester / responder) ----
    {"local_ack_timeout_err", CC::Transport, 32, kWrap, false, 1, "events",
     "local ACK timer expired: the whole unacknowledged window is resent (Go-Back-N)"},
    {"packet_seq_err", CC::Transport, 32, kWrap, false, 1, "events",
     "sequence-error NAKs received: the responder saw a gap and asked for a resend"},
    {"implied_nak_seq_err", CC::Transport, 32, kWrap, false, 1, "events",
     "responses with a later PSN than expected (implied NAK): a request or reply was lost"},
    {"duplicate_request", CC::Transport, 32, kWrap, false, 1, "packets",
     "retransmitted requests received again (responder side of a resend)"},
    {"out_of_sequence", CC::Transport, 32, kWrap, false, 1, "packets",
     "packets received out of sequence and dropped (responder side of a loss)"},
    {"rnr_nak_retry_err", CC::Transport, 32, kWrap, false, 1, "events",
     "receiver-not-ready retries exhausted: QP moved to error"},
    {"req_transport_retries_exceeded", CC::Transport, 32, kWrap, false, 1, "events",
     "transport retries exhausted: QP moved to error, the job sees a failure"},
    {"roce_adp_retrans", CC::Transport, 32, kWrap, false, 1, "events", "RoCE adaptive retransmissions"},
    // ---- traffic (context for the deltas) ----
    {"port_xmit_data", CC::Traffic, 64, kSat, true, 4, "bytes",
     "data transmitted (kernel reports 4-byte words)"},
    {"port_rcv_data", CC::Traffic, 64, kSat, true, 4, "bytes", "data received (kernel reports 4-byte words)"},
    {"port_xmit_packets", CC::Traffic, 64, kSat, true, 1, "packets", "packets transmitted"},
    {"port_rcv_packets", CC::Traffic, 64, kSat, true, 1, "packets", "packets received"},
};

} // namespace

const CounterInfo *find_counter(const std::string &name) {
    for (const CounterInfo &c : kCatalog) {
        if (name == c.name) {
            return &c;
        }
    }
    return nullptr;
}

CounterWidth counter_width(const CounterInfo *info, bool hw) {
    if (info != nullptr) {
        return {info->width_bits, info->overflow, info->legacy32};
    }
    return hw ? CounterWidth{32, Overflow::Wrap, false} : CounterWidth{64, Overflow::Saturate, false};
}

const CounterInfo *counter_catalog(std::size_t *count) {
    *count = sizeof(kCatalog) / sizeof(kCatalog[0]);
    return kCatalog;
}

const char *class_name(CounterClass c) {
    switch (c) {
    case CC::LinkIntegrity:
        return "link integrity";
    case CC::Congestion:
        return "congestion";
    case CC::Transport:
        return "transport retransmission";
    case CC::Traffic:
        return "traffic";
    case CC::Other:
        break;
    }
    return "other";
}

std::uint64_t counter_max(int width_bits) {
    return width_bits >= 64 ? ~0ull : (1ull << width_bits) - 1;
}

bool is_error_class(CounterClass c) {
    return c == CC::LinkIntegrity || c == CC::Congestion || c == CC::Transport;
}

} // namespace twohop::rc
