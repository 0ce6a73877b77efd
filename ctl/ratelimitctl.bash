# bash completion for ratelimitctl (installed as
# share/bash-completion/completions/ratelimitctl). Completes options,
# commands, and for the commands that take one, the ACTION from the
# config file's policies (`ratelimitctl policies`).

_ratelimitctl()
{
	local cur prev words cword
	if declare -F _init_completion >/dev/null; then
		_init_completion || return
	else
		cur=${COMP_WORDS[COMP_CWORD]}
		prev=${COMP_WORDS[COMP_CWORD - 1]}
		words=("${COMP_WORDS[@]}")
		cword=$COMP_CWORD
	fi

	local commands="allow peek state reset override unoverride overrides top ping acquire release renew check-config policies reload replay rls health"
	local options="-s --address --addr -c --config -p --pid-file -j --json -T --timeout -k --token-file --tls --cacert --cert --key --servername -V --version -h --help"

	case $prev in
	-c | --config | -p | --pid-file | -k | --token-file | --cacert | --cert | --key)
		COMPREPLY=($(compgen -f -- "$cur"))
		return
		;;
	-s | --address | --addr | -T | --timeout | --servername)
		return
		;;
	esac

	# find the command and the options given before it
	local i cmd= cmdi=0 config=()
	for ((i = 1; i < cword; i++)); do
		case ${words[i]} in
		-c | --config)
			config=(-c "${words[i + 1]}")
			((i++))
			;;
		-s | --address | --addr | -p | --pid-file | -T | --timeout | -k | --token-file | --cacert | --cert | --key | --servername) ((i++)) ;;
		-*) ;;
		*)
			cmd=${words[i]}
			cmdi=$i
			break
			;;
		esac
	done

	if [[ -z $cmd ]]; then
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "$options" -- "$cur"))
		else
			COMPREPLY=($(compgen -W "$commands" -- "$cur"))
		fi
		return
	fi

	local arg=$((cword - cmdi)) # 1 for the first argument of the command
	case $cmd in
	allow | peek | state | reset | override | unoverride | acquire)
		# USER ACTION [USER ACTION]...: actions at even positions
		if ((arg % 2 == 0)) && { [[ $cmd == allow || $cmd == peek ]] || ((arg == 2)); }; then
			local policies
			# the first word of each line: an envoy rule's line goes on to
			# say what the rule is
			policies=$(ratelimitctl "${config[@]}" policies 2>/dev/null | cut -d' ' -f1)
			COMPREPLY=($(compgen -W "$policies" -- "$cur"))
		elif [[ $cmd == override ]] && ((arg == 3)); then
			COMPREPLY=($(compgen -W "unlimited blocked" -- "$cur"))
		fi
		;;
	top)
		# ACTION [N] [denied|requests]
		if ((arg == 1)); then
			local policies
			policies=$(ratelimitctl "${config[@]}" policies 2>/dev/null | cut -d' ' -f1)
			COMPREPLY=($(compgen -W "$policies" -- "$cur"))
		else
			COMPREPLY=($(compgen -W "denied requests" -- "$cur"))
		fi
		;;
	check-config)
		((arg == 1)) && COMPREPLY=($(compgen -f -- "$cur"))
		;;
	replay)
		COMPREPLY=($(compgen -f -- "$cur"))
		;;
	rls | health)
		# their own options; domains and descriptors are the envoy rules'
		[[ $cur == -* ]] && COMPREPLY=($(compgen -W "--addr $([[ $cmd == rls ]] && echo --hits)" -- "$cur"))
		;;
	esac
}
complete -F _ratelimitctl ratelimitctl
