# ktune_tuned_header(): a C/C++ header with the best configuration of a
# kernel, asked of a ktuned daemon at build time. Shipped with ktune's
# package: find_package(ktune) defines it.
#
#   ktune_tuned_header(TARGET app SPEC sgemm.json SERVER gpu7:7070
#                      OUTPUT sgemm_tuned.h [FALLBACK sgemm_fallback.h]
#                      [TIMEOUT 600] [STYLE define|constexpr]
#                      [TOKEN_FILE file] [TLS_CA file])
#
# OUTPUT (relative: in the build folder) is made before TARGET builds and
# its folder is added to TARGET's include path. It is made again when the
# spec or a kernel source it names changes. The daemon tunes the job when
# it has not been tuned (waiting up to TIMEOUT seconds, default 600; the
# job goes on past it) or answers from the job stored. When the daemon
# cannot be reached or does not answer in time, and when SERVER is empty
# or the variable KTUNE_OFFLINE is true, FALLBACK (a header checked in
# beside the spec) is copied to OUTPUT instead, and one line says so: a
# build never breaks because the daemon is down. Without a FALLBACK that
# is an error.
#
# ktune's command line is KTUNE_EXECUTABLE (found beside this file's
# package, else on the PATH).

if(NOT KTUNE_EXECUTABLE)
  # This file is in PREFIX/LIB/cmake/ktune, LIB being lib or lib/<arch>.
  find_program(KTUNE_EXECUTABLE ktune
               HINTS "${CMAKE_CURRENT_LIST_DIR}/../../../bin" "${CMAKE_CURRENT_LIST_DIR}/../../../../bin"
               NO_DEFAULT_PATH)
  find_program(KTUNE_EXECUTABLE ktune)
endif()
set(_ktune_tuned_header_script "${CMAKE_CURRENT_LIST_DIR}/ktuneTunedHeaderRun.cmake")

function(ktune_tuned_header)
  cmake_parse_arguments(K "" "TARGET;SPEC;SERVER;OUTPUT;FALLBACK;TIMEOUT;STYLE;TOKEN_FILE;TLS_CA"
                        "" ${ARGN})
  foreach(required TARGET SPEC OUTPUT)
    if(NOT K_${required})
      message(FATAL_ERROR "ktune_tuned_header: ${required} is required")
    endif()
  endforeach()
  if(K_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "ktune_tuned_header: unknown arguments ${K_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT K_TIMEOUT)
    set(K_TIMEOUT 600)
  endif()
  if(NOT K_STYLE)
    set(K_STYLE define)
  endif()
  get_filename_component(spec "${K_SPEC}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  get_filename_component(out "${K_OUTPUT}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  set(fallback "")
  if(K_FALLBACK)
    get_filename_component(fallback "${K_FALLBACK}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  endif()
  if(NOT EXISTS "${spec}")
    message(FATAL_ERROR "ktune_tuned_header: SPEC ${spec} does not exist")
  endif()
  # The spec's kernel files (the kernel's and the reference's) are inputs
  # too: a changed kernel is tuned again.
  file(READ "${spec}" text)
  get_filename_component(spec_dir "${spec}" DIRECTORY)
  set(depends "${spec}")
  foreach(path "kernel;file" "verification;referenceKernel;kernel;file")
    string(JSON kernel_file ERROR_VARIABLE missing GET "${text}" ${path})
    if(NOT missing AND kernel_file)
      get_filename_component(kernel_file "${kernel_file}" ABSOLUTE BASE_DIR "${spec_dir}")
      list(APPEND depends "${kernel_file}")
    endif()
  endforeach()
  if(fallback)
    list(APPEND depends "${fallback}")
  endif()
  set(offline OFF)
  if(KTUNE_OFFLINE OR NOT K_SERVER)
    set(offline ON)
  endif()
  get_filename_component(out_dir "${out}" DIRECTORY)
  add_custom_command(
    OUTPUT "${out}"
    COMMAND "${CMAKE_COMMAND}" "-DKTUNE=${KTUNE_EXECUTABLE}" "-DSPEC=${spec}" "-DSERVER=${K_SERVER}"
            "-DOUTPUT=${out}" "-DFALLBACK=${fallback}" "-DTIMEOUT=${K_TIMEOUT}"
            "-DSTYLE=${K_STYLE}" "-DTOKEN_FILE=${K_TOKEN_FILE}" "-DTLS_CA=${K_TLS_CA}"
            "-DOFFLINE=${offline}" -P "${_ktune_tuned_header_script}"
    DEPENDS ${depends} "${_ktune_tuned_header_script}"
    COMMENT "Asking ktune for the best configuration: ${K_OUTPUT}"
    VERBATIM)
  string(MAKE_C_IDENTIFIER "ktune_header_${K_TARGET}_${K_OUTPUT}" header_target)
  add_custom_target(${header_target} DEPENDS "${out}")
  add_dependencies(${K_TARGET} ${header_target})
  target_include_directories(${K_TARGET} PRIVATE "${out_dir}")
endfunction()
