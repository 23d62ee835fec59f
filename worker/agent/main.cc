// ablate-worker: the per-node agent (see agent/agent.h and agent/setup.h).
#include "agent/setup.h"

int main(int argc, char** argv) { return ablate::agent::WorkerMain(argc, argv); }
