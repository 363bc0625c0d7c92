/*
 * The argument of th_stage (gpu_kernels.cu): a stream-ordered call's host copy in one launch on
 * the application's stream, instead of five stream operations (stream_job.h, steps 1-5):
 *
 *   1  the input, device -> the host copy (stores over PCIe into registered host memory)
 *   2  arrived = token   (after a system-scope fence: the copy is visible to the host first)
 *   3  wait until gate >= token (cyclic 64-bit comparison, ld.acquire.sys; no timeout, as
 *      cuStreamWaitValue64's: the host opens the gate whatever happens to the call)
 *   4  the result, host copy -> the device receive buffer (ld.cv: no stale cached line)
 *   5  released = token  (after every load of step 4 returned: the copy may be reused)
 *
 * One block of kStageThreads threads; meant for small messages (coll_twohop_enqueue_stage_
 * kernel_max_bytes), where the copies' and memory operations' fixed costs dominate. Every
 * pointer is a device address; `host` and the words are registered host memory (StreamSlot).
 */
#ifndef TWOHOP_CUDA_STAGE_ARGS_H
#define TWOHOP_CUDA_STAGE_ARGS_H

namespace twohop {

struct StageArgs {
    const char *in;                 // device input (bytes)
    char *host;                     // device address of the host copy (at least bytes)
    char *out;                      // device receive buffer (may equal in)
    unsigned long long bytes;       // message size in bytes
    unsigned long long *arrived;    // device addresses of the slot's words (StreamWords)
    const unsigned long long *gate;
    unsigned long long *released;
    unsigned long long token;       // this call's value of the three words
};

constexpr unsigned kStageThreads = 256;

} // namespace twohop

#endif
