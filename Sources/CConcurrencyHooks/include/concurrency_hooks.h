#ifndef CCONCURRENCYHOOKS_H
#define CCONCURRENCYHOOKS_H

// The Swift runtime's hooks for taking over the global and main executors
// (swift/include/swift/Runtime/ConcurrencyHooks.def) are variables of
// libswift_Concurrency: function pointers, null until set, which the runtime
// calls instead of its own (libdispatch's) enqueue. Each takes the runtime's
// arguments and then the original function, in Swift's calling convention;
// TaskPool passes @convention(thin) functions.

/// Sets the four hooks once, before the process's first task.
void cch_install(void *_Nonnull global, void *_Nonnull delay, void *_Nonnull deadline, void *_Nonnull main_executor);

/// The processors this process may run on (its affinity mask), at least 1.
int cch_available_processors(void);

#endif
