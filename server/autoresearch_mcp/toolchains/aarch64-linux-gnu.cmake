# CMake toolchain of the aarch64-qemu platform: a cross build for 64-bit ARM Linux on any Linux host
# (Debian: gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu, qemu-user). The platform exports it as
# CMAKE_TOOLCHAIN_FILE, which CMake >= 3.21 reads when it configures a new build directory, so a
# project's own CMake build cross-compiles without changes; try_run and tests run under qemu.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

# The platform's CC / CXX when set (they name the cross compilers), else the Debian names.
if(DEFINED ENV{CC})
  set(CMAKE_C_COMPILER $ENV{CC})
else()
  set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
endif()
if(DEFINED ENV{CXX})
  set(CMAKE_CXX_COMPILER $ENV{CXX})
else()
  set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
endif()

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
