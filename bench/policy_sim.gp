# Misses / OPT of every policy per workload, at 50% and 75% of the footprint
# (the pivot policy_table.py writes next to the table).
#   gnuplot -e "in='build/results/policy-sim.dat'; out='...png'" bench/policy_sim.gp
set terminal pngcairo size 1800,700 font ",10" noenhanced
set output out
set datafile separator "\t"
set style data histograms
set style histogram clustered gap 2
set style fill solid 0.85 border -1
set logscale y 2
set yrange [0.9:16]
set ytics (1, 1.1, 1.25, 1.5, 2, 3, 4, 8, 16)
set grid ytics
set ylabel "misses / Belady OPT (log scale)"
set title "Replacement policies against OPT (workload@capacity as a fraction of its footprint)"
set key outside right top
set xtics rotate by -40 scale 0
# Every column the pivot has: the hinted policies too (the last, "hinted",
# only differs from its fallback BRRIP where a trace carries hints).
colors = "#7e2f8e #009e73 #56b4e9 #e69f00 #f0e442 #0072b2 #d55e00 #000000 #cc79a7 #e41a1c #4daf4a"
plot for [i=2:12] in using i:xtic(1) title columnheader(i) lc rgb word(colors, i - 1)
