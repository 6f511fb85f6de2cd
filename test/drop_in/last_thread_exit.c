/* last_thread_exit.c - a process ends when its last thread exits.
 *
 * A common server shape: main() starts the worker threads and leaves with
 * pthread_exit(), and the process exits (status 0) when the last worker
 * returns.  Whatever threads the allocator keeps for itself must not hold
 * the process alive after that, nor keep it from dying of SIGTERM.
 *
 * The scenario runs in a child (forked before any thread exists); its
 * workers allocate and free enough memory for purging to begin and wait
 * longer than the purge delay, so a background purger would be running.
 * The parent waits up to 20 s for the child to exit 0; if it is still
 * there it sends SIGTERM, reports whether that ended it, and kills it.
 * Skipped (exit 77) under ThreadSanitizer, whose own thread keeps any
 * such process alive.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include "drop_in.h"

#define WAIT_S 20

static void *worker(void *arg)
{
    uint32_t s = (uint32_t)(uintptr_t)arg;
    for (int round = 0; round < 4; round++) {
        void *p[128];
        for (int i = 0; i < 128; i++)
            if ((p[i] = block_make(pick_size(&s, 32), rnd(&s))) == NULL)
                _exit(3);
        for (int i = 0; i < 128; i++) {
            if (block_check(p[i]) != NULL)
                _exit(4);
            alloc_free(p[i]);
        }
    }
    alloc_free(alloc_malloc((size_t)8 << 20));
    /* Longer than the purge delay: a purger would have started by now. */
    long delay = alloc_option_get(ALLOC_OPTION_PURGE_DELAY_MS);
    if (delay < 0 || delay > 2000)
        delay = 2000;
    usleep((useconds_t)(2 * delay + 100) * 1000);
    return NULL;
}

static int scenario(void)
{
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 7)) != 0)
            _exit(5);
    pthread_exit(NULL);         /* the process ends with the last worker */
}

static bool wait_for(pid_t pid, int *st, long ms)
{
    for (long waited = 0; waited < ms; waited += 5) {
        pid_t r = waitpid(pid, st, WNOHANG);
        if (r == pid)
            return true;
        if (r < 0 && errno != EINTR)
            die("waitpid: %s", strerror(errno));
        usleep(5000);
    }
    return false;
}

int main(void)
{
#ifdef DROP_IN_TSAN
    /* ThreadSanitizer's runtime has a thread of its own that outlives
     * main's pthread_exit, shoal or not: nothing to learn here. */
    printf("SKIP: under ThreadSanitizer no process ends with its last thread\n");
    return 77;
#endif
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0)
        return scenario();
    int st = 0;
    if (!wait_for(pid, &st, WAIT_S * 1000L)) {
        kill(pid, SIGTERM);
        bool term = wait_for(pid, &st, 3000);
        if (!term) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
        }
        die("the process did not end %d s after its last thread exited (a thread of "
            "the allocator keeps it alive); SIGTERM %s", WAIT_S,
            term ? "ended it" : "did not end it either (the signal stays pending)");
    }
    if (WIFSIGNALED(st))
        die("the process died of signal %d", WTERMSIG(st));
    if (WEXITSTATUS(st) != 0)
        die("the process exited %d", WEXITSTATUS(st));
    printf("last_thread_exit: the process ended with its last thread: ok\n");
    return 0;
}
