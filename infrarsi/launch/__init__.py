"""Reading and editing launch files without any framework: the bash subset launch scripts are written in
(:mod:`.bash`, with :mod:`.bash_eval` and :mod:`.bash_lex`), launcher command lines and ``#SBATCH``
directives (:mod:`.command`), and in-place edits of TOML job files (:mod:`.toml_edit`). The framework
adapters, ``apply`` and the contract drafts all read launches through it."""
