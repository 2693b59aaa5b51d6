# A ';' in a test's PASS_REGULAR_EXPRESSION (or FAIL_REGULAR_EXPRESSION) makes CMake
# read the value as a list of expressions, any one of which decides: "given 2 times;
# it takes one value" passed on either half alone, and five such checks were weaker
# than they read. Write a ';' in an expression as [;]. This script fails on any other
# in the CMake files under SOURCE_DIR (fixtures/ and build trees aside).
#   cmake -DSOURCE_DIR=DIR -P tests/regex_lists.cmake
file(GLOB_RECURSE files "${SOURCE_DIR}/CMakeLists.txt" "${SOURCE_DIR}/*.cmake")
set(found 0)
set(checked 0)
foreach(path IN LISTS files)
  file(RELATIVE_PATH name "${SOURCE_DIR}" "${path}")
  if(name MATCHES "(^|/)(fixtures|build[^/]*|\\.deps|\\.git|CMakeFiles)/")
    continue()
  endif()
  file(READ "${path}" text)
  string(REPLACE "[;]" "" text "${text}")
  string(REPLACE ";" "<semicolon>" text "${text}")  # no list splitting below
  string(REGEX MATCHALL "REGULAR_EXPRESSION[ \t\r\n]+\"([^\"\\\\]|\\\\.)*\"" values "${text}")
  foreach(value IN LISTS values)
    math(EXPR checked "${checked} + 1")
    if(value MATCHES "<semicolon>")
      string(REPLACE "<semicolon>" ";" value "${value}")
      string(SUBSTRING "${value}" 0 160 start)
      message("${name}: a ';' splits this expression into a list (write [;]): ${start}")
      math(EXPR found "${found} + 1")
    endif()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no REGULAR_EXPRESSION found under ${SOURCE_DIR}: nothing was checked")
endif()
if(found GREATER 0)
  message(FATAL_ERROR "${found} of ${checked} test expressions are split by a ';'")
endif()
message("${checked} test expressions checked: none is split by a ';'")
