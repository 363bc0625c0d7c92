/*
 * twohop_rc_from_params: the coll_twohop_rc_* rows of the parameter table as rc_tuning's
 * settings (same field names and types). Plain C, shared by the adapter (validation at open)
 * and the core (UCX configuration at set-up).
 */
#ifndef TWOHOP_RC_SETTINGS_H
#define TWOHOP_RC_SETTINGS_H

#include "params.h"
#include "rc_api.h"

static inline struct twohop_rc_settings twohop_rc_from_params(const struct twohop_params *p) {
    struct twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    s.rc_path_mtu = p->rc_path_mtu;
    s.rc_timeout = p->rc_timeout;
    s.rc_timeout_us = p->rc_timeout_us;
    s.rc_retry_count = p->rc_retry_count;
    s.rc_rnr_timer = p->rc_rnr_timer;
    s.rc_rnr_retry = p->rc_rnr_retry;
    s.rc_tx_queue_len = p->rc_tx_queue_len;
    s.rc_rx_queue_len = p->rc_rx_queue_len;
    s.rc_tx_cq_moderation = p->rc_tx_cq_moderation;
    s.rc_num_paths = p->rc_num_paths;
    s.rc_sl = p->rc_sl;
    s.rc_traffic_class = p->rc_traffic_class;
    s.rc_adaptive_routing = p->rc_adaptive_routing;
    s.rc_stagger = p->rc_stagger;
    s.rc_report = p->rc_report;
    return s;
}

#endif
