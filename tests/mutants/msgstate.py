"""Mutants for a message's state machine (src/base/msgstate.c): the one table
of moves, the words, and the sets a conditional move starts from. Each a small
plausible bug, and the test that must catch it."""
MUTANTS = [
    dict(name="msgstate-sent-may-expire",
         file="src/base/msgstate.c",
         old="    [MSG_SENT] = MSG_BIT(MSG_DELIVERED) | MSG_BIT(MSG_FAILED),",
         new="    [MSG_SENT] = MSG_BIT(MSG_DELIVERED) | MSG_BIT(MSG_FAILED) | MSG_BIT(MSG_EXPIRED),",
         test="unit:test_msgstate",
         why="a message the provider accepted may be ended expired (by the sweep or retention), over its 'sent'"),
    dict(name="msgstate-refused-move-still-moves",
         file="src/base/msgstate.c",
         old="""    if (!msg_move_ok(*state, to))
        return -1;
    *state = to;""",
         new="""    if (!msg_move_ok(*state, to)) {
        *state = to;
        return -1;
    }
    *state = to;""",
         test="unit:test_msgstate",
         why="a move the table refuses is reported, yet the state has moved anyway"),
    dict(name="msgstate-parse-prefix",
         file="src/base/msgstate.c",
         old="        if (strcmp(word, msg_rows[s].word) == 0) {",
         new="        if (strncmp(word, msg_rows[s].word, strlen(msg_rows[s].word)) == 0) {",
         test="unit:test_msgstate",
         why="a word that only starts with a state's ('queued ', 'sending,sent') is read as that state"),
]
