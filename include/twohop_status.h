/*
 * twohop_status: the one status type of twohop's data path, shared by every layer (plain C).
 * Foreign codes (ucs_status_t, errno, Open MPI return codes) are translated where they arise;
 * the Open MPI adapter turns a status into an MPI error class.
 */
#ifndef TWOHOP_STATUS_H
#define TWOHOP_STATUS_H

typedef enum twohop_status {
    TWOHOP_OK = 0,
    TWOHOP_ERR_NO_MEMORY = 1, /* malloc/shm/mmap failed */
    TWOHOP_ERR_TRANSPORT = 2, /* UCX reported an error or a peer failed */
    TWOHOP_ERR_HOST = 3,      /* a service of the host MPI (allgather, agreement) failed */
    TWOHOP_ERR_BAD_PARAM = 4, /* invalid MCA parameter value */
    TWOHOP_ERR_REDUCE = 5     /* the user reduction function reported an error */
} twohop_status;

#endif
