/* fork.h - pthread_atfork handlers (fork.c): the locks held across
 * fork(), and the child's repairs of what vanished threads left half
 * done. */
#ifndef SHOAL_FORK_H
#define SHOAL_FORK_H

/* Register the handlers; called once at start-up. */
void shoal_fork_init(void);

#endif
