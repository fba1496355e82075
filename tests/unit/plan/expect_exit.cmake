# Runs CMD with ARGS (a ;-list); fails unless it exits with EXPECT and its stderr contains MATCH.
execute_process(COMMAND ${CMD} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL ${EXPECT})
  message(FATAL_ERROR "expected exit ${EXPECT}, got ${rc}; stderr: ${err}")
endif()
string(FIND "${err}" "${MATCH}" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "stderr does not mention '${MATCH}': ${err}")
endif()
