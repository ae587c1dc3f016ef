# Writes OUTPUT, a C++ source defining `const char NAME[]` in namespace
# ktune with the text of INPUT and a terminating NUL, so a real source file
# (a .cu the editor and the compiler see as CUDA, a script from npm) travels
# inside the binary.
#   cmake -DINPUT=helpers.cu -DOUTPUT=helpers_source.cc -DNAME=kMeasureHelperSource -P embed_text.cmake
#
# The text is written as a list of byte values, not a string literal:
# compilers need only accept literals up to 65,536 characters, and clang's
# -Woverlength-strings (in -Wpedantic) refuses longer ones, such as Chart.js.
# A byte list also takes any content, with nothing to escape.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
if(hex_length GREATER 0)
  # Sixteen bytes a line, each a character literal '\xNN' (a char, so a
  # byte over 0x7f is no narrowing conversion).
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
  string(REPEAT "'[^']+'," 16 sixteen)
  string(REGEX REPLACE "(${sixteen})" "\\1\n" bytes "${bytes}")
else()
  set(bytes "")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by cmake/embed_text.cmake: do not edit.\n"
  "namespace ktune {\n"
  "extern const char ${NAME}[];\n"
  "const char ${NAME}[] = {\n${bytes}'\\0'};\n"
  "}  // namespace ktune\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
