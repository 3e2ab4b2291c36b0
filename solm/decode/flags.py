"""Flags a runtime puts on a result when something cut decoding short or forced its hand."""

MAX_NEW_TOKENS = "max_new_tokens"  # every runtime: the token cap was reached

# PASTA
POOL_FULL = "pool_full"  # the shared KV pool had no room for the next step
FORK_CAPPED = "fork_capped"  # a block reached --max-fork-tokens; the runtime closed it
FORK_EOS = "eos_in_fork"  # a block sampled EOS; read as `</async>`
EOS_WITH_OPEN_FORKS = "eos_with_open_forks"  # main ended while blocks were still open
TOPIC_CAPPED = "topic_capped"  # a topic reached its length cap and was forced to close
BLOCK_CUT = "block_cut"  # a stop cut a block short; the runtime closed it

# PASTA flags that mean the model broke the language (a length cap alone does not)
PASTA_STRUCTURAL = (FORK_EOS, EOS_WITH_OPEN_FORKS, FORK_CAPPED, TOPIC_CAPPED, POOL_FULL,
                    BLOCK_CUT)
