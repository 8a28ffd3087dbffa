/*
 * zerotrain: dispatch. flags -> config -> world -> model -> trainer happens in
 * the command files (cmd/cmd.h); this is the only entry point.
 */
#include <string.h>

#include "cmd/cmd.h"

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "check"))
        return cmd_check(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "consolidate"))
        return cmd_consolidate(argc, argv);
    if (argc > 1 && (!strcmp(argv[1], "generate") || !strcmp(argv[1], "eval")))
        return cmd_from_checkpoint(argc, argv);
    return cmd_train(argc, argv);
}
