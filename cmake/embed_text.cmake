# Writes OUTPUT, a C++ source defining `const char NAME[]` in namespace
# ktune with the text of INPUT, so a real source file (a .cu the editor and
# the compiler see as CUDA) travels inside the binary.
#   cmake -DINPUT=helpers.cu -DOUTPUT=helpers_source.cc -DNAME=kMeasureHelperSource -P embed_text.cmake
file(READ "${INPUT}" text)
set(delimiter "ktune_embed")
string(FIND "${text}" ")${delimiter}" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )${delimiter}")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by cmake/embed_text.cmake: do not edit.\n"
  "namespace ktune {\n"
  "extern const char ${NAME}[];\n"
  "const char ${NAME}[] = R\"${delimiter}(${text})${delimiter}\";\n"
  "}  // namespace ktune\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
