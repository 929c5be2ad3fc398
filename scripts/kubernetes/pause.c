/* roughnet's pause: the process that holds a pod's namespaces (the role of registry.k8s.io/pause).
 * Waits for signals; SIGINT/SIGTERM end it, SIGCHLD reaps children (it is PID 1 of the pod
 * when the pod shares its PID namespace). Built with: gcc -static -O2 -o pause pause.c */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(int argc, char **argv) {
  if (argc > 1 && argv[1][0] == '-' && argv[1][1] == 'v') { puts("pause (roughnet) 3.10"); return 0; }
  if (getpid() != 1) fprintf(stderr, "pause: warning: not PID 1\n");
  struct sigaction sa = {0};
  sa.sa_handler = stop;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sa.sa_handler = reap;
  sa.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  sigset_t none;
  sigemptyset(&none);
  for (;;) sigsuspend(&none);
}
