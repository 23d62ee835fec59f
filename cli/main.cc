// ablate: the command-line client of the ablated coordinator. See app.h and exit_codes.h.
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "app.h"

int main(int argc, char** argv) {
  ablate::cli::Io io;
  io.out = &std::cout;
  io.err = &std::cerr;
  io.tty = ::isatty(STDOUT_FILENO) == 1;
  if (winsize ws{}; io.tty && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    io.width = ws.ws_col;
    io.height = ws.ws_row > 0 ? ws.ws_row : io.height;
  }
  io.now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  return ablate::cli::RunCli(std::vector<std::string>(argv + 1, argv + argc), io,
                             ablate::ProcessEnv());
}
