# The build step of ktune_tuned_header() (ktuneTunedHeader.cmake): asks the
# daemon, or falls back on the checked-in header, saying so in one line.
#   cmake -DKTUNE=... -DSPEC=... -DSERVER=... -DOUTPUT=... -DFALLBACK=...
#         -DTIMEOUT=... -DSTYLE=... -DTOKEN_FILE=... -DTLS_CA=... -DOFFLINE=...
#         -P ktuneTunedHeaderRun.cmake
function(use_fallback why)
  if(NOT FALLBACK)
    message(FATAL_ERROR "ktune_tuned_header: ${why}, and no FALLBACK header was given for ${OUTPUT}")
  endif()
  file(COPY_FILE "${FALLBACK}" "${OUTPUT}" ONLY_IF_DIFFERENT)
  file(TOUCH_NOCREATE "${OUTPUT}")
  message(STATUS "ktune: ${why}; ${OUTPUT} is the fallback ${FALLBACK}")
endfunction()

get_filename_component(out_dir "${OUTPUT}" DIRECTORY)
file(MAKE_DIRECTORY "${out_dir}")
if(OFFLINE)
  use_fallback("offline (no SERVER, or KTUNE_OFFLINE)")
  return()
endif()
if(NOT KTUNE OR NOT EXISTS "${KTUNE}")
  use_fallback("no ktune command line found (KTUNE_EXECUTABLE)")
  return()
endif()
set(args --server "${SERVER}" tune "${SPEC}" --wait --emit-header "${OUTPUT}.tmp"
         --header-style "${STYLE}" --timeout 10)
if(TOKEN_FILE)
  list(APPEND args --token-file "${TOKEN_FILE}")
endif()
if(TLS_CA)
  list(APPEND args --tls-ca "${TLS_CA}")
endif()
file(REMOVE "${OUTPUT}.tmp")
execute_process(COMMAND "${KTUNE}" ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT "${TIMEOUT}")
if(rc EQUAL 0 AND EXISTS "${OUTPUT}.tmp")
  file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
  return()
endif()
file(REMOVE "${OUTPUT}.tmp")
# What went wrong: ktune's last line (its error), or the timeout.
string(STRIP "${err}" err)
string(REGEX REPLACE ".*\n" "" last_line "${err}")
if(NOT rc MATCHES "^[0-9]+$")
  set(last_line "${rc}")  # execute_process says why it stopped (a timeout)
elseif(NOT last_line)
  set(last_line "exit code ${rc}")
endif()
use_fallback("the daemon at ${SERVER} gave no header (${last_line})")
