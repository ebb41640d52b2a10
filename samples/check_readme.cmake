# cmake -DREADME=<README.md> -DSAMPLE=<readme_example.cpp> -P check_readme.cmake
# Fails unless README.md contains the sample's code (all but its first line,
# a comment) verbatim, so the README's example is always one that compiles.
file(READ "${README}" readme)
file(READ "${SAMPLE}" sample)
string(FIND "${sample}" "\n" first_newline)
math(EXPR start "${first_newline} + 1")
string(SUBSTRING "${sample}" ${start} -1 code)
string(FIND "${readme}" "```cpp\n${code}```" found)
if(found EQUAL -1)
  message(FATAL_ERROR "README.md's example differs from ${SAMPLE}: copy the file's code "
                      "(without its first comment line) into README.md's ```cpp block")
endif()
message(STATUS "README.md's example matches ${SAMPLE}")
