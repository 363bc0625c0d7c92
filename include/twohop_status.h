/*
 * twohop_status: the one status type of twohop's data path, shared by every layer (plain C).
 * Foreign codes (ucs_status_t, errno, Open MPI return codes) are translated where they arise;
 * the Open MPI adapter turns a status into an MPI error class.
 */
#ifndef TWOHOP_STATUS_H
#define TWOHOP_STATUS_H

typedef enum twohop_status {
    TWOHOP_PENDING = -1,      /* not an error: an allreduce in flight has not finished yet
                                 (a job's advance(), coll/schedule/job.h) */
    TWOHOP_OK = 0,
    TWOHOP_ERR_NO_MEMORY = 1, /* malloc/shm/mmap failed */
    TWOHOP_ERR_TRANSPORT = 2, /* UCX reported an error or a peer failed */
    TWOHOP_ERR_HOST = 3,      /* a service of the host MPI (allgather, agreement) failed */
    TWOHOP_ERR_BAD_PARAM = 4, /* invalid MCA parameter value */
    TWOHOP_ERR_REDUCE = 5,    /* the user reduction function reported an error */
    TWOHOP_ERR_PEER = 6,      /* a rank of the node failed its part of the call, or its process
                                 is gone */
    TWOHOP_ERR_TIMEOUT = 7,   /* no progress for coll_twohop_timeout seconds */
    TWOHOP_ERR_MISMATCH = 8,  /* ranks disagree: another rank runs a different allreduce
                                 (selection differs) or passed a different message size */
    TWOHOP_ERR_POISONED = 9   /* an earlier twohop call on this communicator failed */
} twohop_status;

#endif
