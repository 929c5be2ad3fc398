/* roughnet's rn-exec: starts a user's program inside a pod of the kubernetes backend
 * (python/roughnet/backends/kubernetes/apps.py), in any image (no shell needed there).
 *
 *   rn-exec --idle
 *       wait for SIGTERM/SIGINT (the command of a user's container until roughnet starts its program);
 *   rn-exec --pidfile F [--netns-of PID] [--cwd DIR] [--uid U --gid G] [--env K=V]... -- PROG ARG...
 *       write its pid to F (the program keeps it: exec, no fork), join the network namespace of PID
 *       (the pod's inner namespace behind roughnet's wire), change to DIR, set the variables, drop to
 *       U:G with no supplementary groups, and exec PROG (looked up in PATH when it has no '/').
 *       A failure before the exec: a line on stderr naming the step, exit 127.
 *
 * Built with: gcc -static -O2 -s -o rn-exec rn-exec.c */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static int fail(const char *what, const char *arg) {
  fprintf(stderr, "rn-exec: %s %s: %s\n", what, arg ? arg : "", strerror(errno));
  return 127;
}

static int usage(void) {
  fputs("usage: rn-exec --idle | rn-exec --pidfile F [--netns-of PID] [--cwd DIR] [--uid U --gid G] "
        "[--env K=V]... -- PROG [ARG...]\n", stderr);
  return 2;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--idle") == 0) {
    struct sigaction sa = {0};
    sa.sa_handler = stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    for (;;) sigsuspend(&none);
  }
  const char *pidfile = NULL, *netns_of = NULL, *cwd = NULL;
  long uid = -1, gid = -1;
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) { i++; break; }
    if (i + 1 >= argc) return usage();
    if (strcmp(a, "--pidfile") == 0) pidfile = argv[++i];
    else if (strcmp(a, "--netns-of") == 0) netns_of = argv[++i];
    else if (strcmp(a, "--cwd") == 0) cwd = argv[++i];
    else if (strcmp(a, "--uid") == 0) uid = strtol(argv[++i], NULL, 10);
    else if (strcmp(a, "--gid") == 0) gid = strtol(argv[++i], NULL, 10);
    else if (strcmp(a, "--env") == 0) {
      char *kv = argv[++i], *eq = strchr(kv, '=');
      if (eq == NULL || eq == kv) return usage();
      *eq = '\0';
      if (setenv(kv, eq + 1, 1) != 0) return fail("setenv", kv);
    } else return usage();
  }
  if (i >= argc || pidfile == NULL || (uid < 0) != (gid < 0)) return usage();
  if (netns_of != NULL) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%s/ns/net", netns_of);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail("open", path);
    if (setns(fd, CLONE_NEWNET) != 0) return fail("setns", path);
    close(fd);
  }
  if (cwd != NULL && chdir(cwd) != 0) return fail("chdir", cwd);
  /* The pid file before the privileges go (the folder is root's); the program keeps this pid. */
  FILE *f = fopen(pidfile, "w");
  if (f == NULL) return fail("open", pidfile);
  fprintf(f, "%d\n", (int)getpid());
  if (fclose(f) != 0) return fail("write", pidfile);
  if (uid >= 0) {
    if (setgroups(0, NULL) != 0) return fail("setgroups", NULL);
    if (setgid((gid_t)gid) != 0) return fail("setgid", NULL);
    if (setuid((uid_t)uid) != 0) return fail("setuid", NULL);
  }
  execvp(argv[i], argv + i);
  return fail("exec", argv[i]);
}
