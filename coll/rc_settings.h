/*
 * twohop_rc_from_params: the coll_twohop_rc_* rows of the parameter table as rc_tuning's
 * settings (same field names and types, both generated from rc_tuning/rc_knobs.def). Plain C, shared by the adapter (validation at open)
 * and the core (UCX configuration at set-up).
 */
#ifndef TWOHOP_RC_SETTINGS_H
#define TWOHOP_RC_SETTINGS_H

#include "params.h"
#include "rc_api.h"

/* Copies every rc_knobs.def field (same name and type on both sides). */
static inline struct twohop_rc_settings twohop_rc_from_params(const struct twohop_params *p) {
    struct twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
#define TWOHOP_RC_KNOB(field, ...) s.field = p->field;
#include "../rc_tuning/rc_knobs.def"
#undef TWOHOP_RC_KNOB
    return s;
}

#endif
