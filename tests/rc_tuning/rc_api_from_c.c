/* Proves rc_api.h compiles as plain C and is usable from C (as the Open MPI adapter, coll/ompi/, does). */
#include "rc_api.h"

#include <string.h>

static void count_pair(const char *name, const char *value, void *arg) {
    (void)name;
    (void)value;
    ++*(int *)arg;
}

/* Returns the number of UCX pairs emitted for rc_timeout = 14, rc_sl = 3, or -1 on error. */
int twohop_rc_test_from_c(void) {
    struct twohop_rc_settings s = TWOHOP_RC_SETTINGS_INIT;
    char err[256];
    int n = 0;
    if (twohop_rc_validate(&s, err, sizeof(err)) != TWOHOP_RC_OK || strlen(err) != 0) {
        return -1;
    }
    s.rc_timeout = 14;
    s.rc_sl = 3;
    s.rc_report = true;
    if (twohop_rc_ucx_pairs(&s, 0, 1, count_pair, &n, err, sizeof(err)) < 0) {
        return -1;
    }
    return n;
}
